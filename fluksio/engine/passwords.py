"""Password hashing with scrypt (memory-hard, in the standard library).

Stored form: ``scrypt$<log2 n>$<r>$<p>$<salt b64>$<hash b64>``, so the cost can be raised
later without invalidating existing hashes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

__all__ = ["LEAST_COST", "dummy_hash", "hash_password", "verify_password"]

_LOG2_N = 15  # n = 32768, r = 8: 32 MiB and roughly 0.1 s per hash on these machines
LEAST_COST = 10
"""The cheapest cost a password may be hashed at (n = 1024): only for a password that
guards nothing (a test's throwaway engine, which logs in for every test)."""
_R = 8
_P = 1
_KEY_LEN = 32


def _derive(password: str, salt: bytes, log2_n: int, r: int, p: int) -> bytes:
    n = 1 << log2_n
    return hashlib.scrypt(
        password.encode(), salt=salt, n=n, r=r, p=p, dklen=_KEY_LEN, maxmem=256 * n * r * p
    )


def hash_password(password: str, *, cost: int = _LOG2_N) -> str:
    """``password`` hashed at ``cost`` (scrypt's n is 2 to that; the stored form says it,
    so verifying needs no setting)."""
    cost = max(LEAST_COST, cost)
    salt = secrets.token_bytes(16)
    digest = _derive(password, salt, cost, _R, _P)
    encode = base64.urlsafe_b64encode
    return f"scrypt${cost}${_R}${_P}${encode(salt).decode()}${encode(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    """True when ``password`` matches ``stored``; False for any malformed ``stored``."""
    try:
        scheme, log2_n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.urlsafe_b64decode(digest)
        actual = _derive(password, base64.urlsafe_b64decode(salt), int(log2_n), int(r), int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(expected, actual)


@functools.cache
def dummy_hash() -> str:
    """A hash to verify against when the username is unknown, so both answers cost the same."""
    return hash_password(secrets.token_urlsafe(16))
