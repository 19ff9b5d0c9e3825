"""Server-sent events read back from their text: the subscriber's side of ``GET /events``
(``fluksio.client``, so ``fluksio runs --follow``, and the tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["EventParser", "ReceivedEvent"]


@dataclass(frozen=True)
class ReceivedEvent:
    """An event as a subscriber reads it back."""

    id: str | None
    kind: str
    data: Any


class EventParser:
    """Server-sent events back from their text, fed one line at a time (a subscriber's
    side: the CLI's ``--follow``, and the tests)."""

    def __init__(self) -> None:
        self._fields: dict[str, str] = {}

    def feed(self, raw: bytes | str) -> ReceivedEvent | None:
        """The event a blank line completes, else None (comments are skipped)."""
        line = (raw.decode("utf-8") if isinstance(raw, bytes) else raw).rstrip("\r\n")
        if line:
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                self._fields[name] = value.removeprefix(" ")
            return None
        fields, self._fields = self._fields, {}
        if "event" not in fields and "data" not in fields:
            return None
        data = json.loads(fields["data"]) if "data" in fields else None
        return ReceivedEvent(fields.get("id"), fields.get("event", "message"), data)
