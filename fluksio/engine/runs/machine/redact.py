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

__all__ = [
    "MIN_SECRET_LENGTH",
    "REDACTED",
    "blankable",
    "redact",
    "secret_names",
    "secret_values",
]

REDACTED = "[redacted]"
MIN_SECRET_LENGTH = 4


def secret_values(params: dict[str, Any], resolved: dict[str, Any]) -> tuple[str, ...]:
    """The values of ``resolved`` that came from ``{"$secret": name}`` references."""
    return blankable(str(resolved[key]) for key in secret_names(params) if key in resolved)


def secret_names(params: dict[str, Any]) -> dict[str, str]:
    """Each parameter given as ``{"$secret": name}``, and the secret it names."""
    return {
        key: value["$secret"]
        for key, value in params.items()
        if isinstance(value, dict) and set(value) == {"$secret"}
    }


def blankable(values: Iterable[str]) -> tuple[str, ...]:
    """``values`` as :func:`redact` takes them: long enough to blank, longest first (so
    that a secret containing another is blanked whole)."""
    found = {value for value in values if len(value) >= MIN_SECRET_LENGTH}
    return tuple(sorted(found, key=len, reverse=True))


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
