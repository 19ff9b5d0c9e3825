"""Secret values a call was given, blanked in what it printed, emitted, raised or returned.

A node that receives a secret as a parameter may print it, emit it, put it in an
exception or return it; the run keeps its logs, events, error and result for anyone who
may read runs. Each value released to the call is replaced with ``[redacted]`` there
before it is stored (in keys too). So a node downstream receives a returned secret as
``[redacted]``: one that needs it takes it as a ``{"$secret": name}`` parameter of its
own. Values shorter than :data:`MIN_SECRET_LENGTH` are left alone: blanking every ``1``
in a log would destroy it and protect nothing.
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
        return {redact(key, secrets): redact(item, secrets) for key, item in value.items()}
    return value
