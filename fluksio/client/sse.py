"""Server-sent events read back from their text: the subscriber's side of ``GET /events``
(``fluksio.client``, so ``fluksio runs --follow``, and the tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluksio.client.bounds import EVENT_BYTES, json_of
from fluksio.client.errors import ClientError

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
        self._size = 0

    def feed(self, raw: bytes | str) -> ReceivedEvent | None:
        """The event a blank line completes, else None (comments are skipped); an event
        over :data:`~fluksio.client.bounds.EVENT_BYTES`, or whose data is no JSON, is
        :class:`~fluksio.client.errors.ClientError`."""
        self._size += len(raw)
        if self._size > EVENT_BYTES:
            raise ClientError(
                f"an event of the live feed is over {EVENT_BYTES} bytes, more than any the"
                " engine sends; given up"
            )
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).rstrip("\r\n")
        if line:
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                self._fields[name] = value.removeprefix(" ")
            return None
        fields, self._fields, self._size = self._fields, {}, 0
        if "event" not in fields and "data" not in fields:
            return None
        data = json_of(fields["data"], "GET /events") if "data" in fields else None
        return ReceivedEvent(fields.get("id"), fields.get("event", "message"), data)
