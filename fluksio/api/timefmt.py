"""Times in API answers: ``datetime`` in UTC, serialised as ISO 8601 with a trailing Z.

The engine keeps epoch seconds; response models hold :class:`~datetime.datetime` (made
with :func:`utc`), and pydantic writes them once, the same way everywhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["iso8601", "utc"]


@overload
def utc(timestamp: float) -> datetime: ...


@overload
def utc(timestamp: float | None) -> datetime | None: ...


def utc(timestamp: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC ``datetime`` (None stays None)."""
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)


def iso8601(timestamp: float | None) -> str | None:
    """Epoch seconds as the text the API shows (for the few answers that are not models)."""
    moment = utc(timestamp)
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")
