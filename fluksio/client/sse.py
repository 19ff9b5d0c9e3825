"""Server-sent events read back from their text: the subscriber's side of ``GET /events``
(``fluksio.client``, so ``fluksio runs --follow``, and the tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluksio.client.bounds import EVENT_BYTES, Bounds, check_parsed, json_of
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

    def __init__(self, parsed_bytes: int = Bounds.parsed_bytes) -> None:
        """``parsed_bytes``: what one event's data may become as JSON (its client's
        :attr:`~fluksio.client.bounds.Bounds.parsed_bytes`)."""
        self._fields: dict[str, str] = {}
        self._size = 0
        self._parsed_bytes = parsed_bytes

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
        data = None
        if "data" in fields:
            raw = fields["data"].encode()
            check_parsed(raw, "GET /events (one event)", self._parsed_bytes)
            data = json_of(raw, "GET /events")
        return ReceivedEvent(fields.get("id"), fields.get("event", "message"), data)
