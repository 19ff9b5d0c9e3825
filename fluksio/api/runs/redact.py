"""Secret values a call was given, blanked in what it printed, emitted or raised.

A node that receives a secret as a parameter may print it, emit it or put it in an
exception; the run keeps its logs, events and error for anyone who may read runs. Each
value released to the call is replaced with ``[redacted]`` there before it is stored.
Values shorter than :data:`MIN_SECRET_LENGTH` are left alone: blanking every ``1`` in a
log would destroy it and protect nothing. A node's result is its deliberate output and
is kept as returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "redact", "secret_values"]

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4


def secret_values(params: dict[str, Any], resolved: dict[str, Any]) -> tuple[str, ...]:
    """The values of ``resolved`` that came from ``{"$secret": name}`` references."""
    found = {
        str(resolved[key])
        for key, value in params.items()
        if isinstance(value, dict) and set(value) == {"$secret"} and key in resolved
    }
    # Longest first, so that a secret containing another is blanked whole.
    return tuple(sorted((v for v in found if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True))


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (text, or JSON made of lists and dicts) with every secret blanked."""
    secrets = tuple(secrets)
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, list):
        return [redact(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: redact(item, secrets) for key, item in value.items()}
    return value
