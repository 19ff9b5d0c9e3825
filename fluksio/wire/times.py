"""Times in API answers: ``datetime`` in UTC, serialised as ISO 8601 with a trailing Z.

The engine keeps epoch seconds; response models hold :class:`~datetime.datetime` (made
with :func:`utc`), and pydantic writes them once, the same way everywhere
(``2026-12-01T07:00:00.123456Z``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload

__all__ = ["utc"]


@overload
def utc(timestamp: float) -> datetime: ...


@overload
def utc(timestamp: float | None) -> datetime | None: ...


def utc(timestamp: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC ``datetime`` (None stays None)."""
    return None if timestamp is None else datetime.fromtimestamp(timestamp, UTC)
