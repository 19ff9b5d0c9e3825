"""Times in API answers: ISO 8601 in UTC, with a trailing Z."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso8601"]


def iso8601(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")
