"""A call's own artifact credential: its worker's artifact token bound to its call id.

Every call on a worker shares one signed artifact token (signing one per call was a tenth
of the engine's work per remote call). What a call saves must still be known as its own:
a checkpoint names only state the call itself uploaded. So each call is given the shared
token with its call id and a MAC over both appended (``<jwt>~<call id>~<mac>``): an HMAC
costs a microsecond, and the key is derived from the engine's signing key, so a rotation
that voids the signed token voids the binding too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.hazmat.primitives import serialization

from fluksio.engine.keys import SigningKey

__all__ = ["bind", "unbind"]

SEPARATOR = "~"
_MAC_CHARS = 22  # 128 bits, base64url without padding


def bind(base: str, call_id: str, key: SigningKey) -> str:
    """``base`` (a signed artifact token) as the credential of call ``call_id`` alone."""
    return f"{base}{SEPARATOR}{call_id}{SEPARATOR}{_mac(base, call_id, key)}"


def unbind(token: str, key: SigningKey) -> tuple[str, str | None] | None:
    """The signed token inside ``token`` and the call it is bound to (None: not bound to
    a call); None when the binding's MAC does not check out."""
    if SEPARATOR not in token:
        return token, None
    parts = token.rsplit(SEPARATOR, 2)
    if len(parts) != 3 or not parts[1]:
        return None
    base, call_id, mac = parts
    if not hmac.compare_digest(mac, _mac(base, call_id, key)):
        return None
    return base, call_id


def _mac(base: str, call_id: str, key: SigningKey) -> str:
    digest = hmac.new(_binding_key(key), f"{base}{SEPARATOR}{call_id}".encode(), "sha256")
    return base64.urlsafe_b64encode(digest.digest()).decode()[:_MAC_CHARS]


_KEYS: dict[str, bytes] = {}


def _binding_key(key: SigningKey) -> bytes:
    """A key for the MAC alone, derived from the signing key (never the key itself)."""
    found = _KEYS.get(key.kid)
    if found is None:
        raw = key.private.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        found = hashlib.sha256(b"fluksio call artifact binding\x00" + raw).digest()
        _KEYS.clear()  # one key is current at a time
        _KEYS[key.kid] = found
    return found
