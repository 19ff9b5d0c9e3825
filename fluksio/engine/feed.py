"""The engine's live event feed: numbered events in a bounded buffer, read by subscribers.

Every event gets the next number of this engine process; its id is ``EPOCH.NUMBER``, so
an id from before a restart is never mistaken for one after it. A subscriber that comes
back with the last id it saw gets every event after it, provided they are still in the
buffer; otherwise (too far behind, or another engine process) it is told to refetch what
it shows. Publishing is synchronous: the SSE text of an event is made once, when it is
published, and shared by every subscriber.

**Bounded by count and by bytes.** The buffer keeps at most ``capacity`` events and at
most ``max_bytes`` of their text, the oldest leaving first; only the text is kept (and a
run id to filter by). A *view* (the whole queue, the whole provisioning state) is
published under a key, and a newer view of the same key empties the older one in the
buffer: replaying a stale snapshot before the current one tells a subscriber nothing, and
it was these (up to a megabyte each, once a second while calls wait) that filled memory.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from fluksio.clock import SYSTEM_CLOCK, Clock

__all__ = [
    "DEFAULT_CAPACITY",
    "FeedEvent",
    "LiveFeed",
    "Position",
    "sse_frame",
]

DEFAULT_CAPACITY = 10_000
DEFAULT_MAX_BYTES = 64 << 20


def sse_frame(event_id: str, kind: str, data: object) -> bytes:
    """One server-sent event: ``id``, ``event`` and one ``data`` line of JSON."""
    text = json.dumps(data, separators=(",", ":"), default=str)
    return f"id: {event_id}\nevent: {kind}\ndata: {text}\n\n".encode()


@dataclass(eq=False)
class FeedEvent:
    seq: int
    kind: str
    event_id: str
    run_id: str | None
    """The run it is about, if any (``?run=`` keeps only those)."""
    text: bytes = field(repr=False)
    """The event as server-sent-events text; empty once a newer view superseded it."""
    view: str | None = None

    def frame(self) -> bytes:
        return self.text


@dataclass(frozen=True)
class Position:
    """Where a subscriber resumes: after ``seq``, or nowhere (``refetch`` says why)."""

    seq: int
    refetch: str | None = None


class LiveFeed:
    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self.epoch = secrets.token_hex(4)
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._events: deque[FeedEvent] = deque()
        self._bytes = 0
        self._views: dict[str, FeedEvent] = {}
        self._seq = 0
        self._arrived: asyncio.Event | None = None
        self.subscribers = 0
        """How many streams are open now (for the metrics)."""
        self.closed = False
        """Set when the engine stops: every stream ends."""

    @property
    def seq(self) -> int:
        """The number of the newest event (0 before the first)."""
        return self._seq

    @property
    def last_id(self) -> str:
        """The id of the newest event (``EPOCH.0`` before the first)."""
        return f"{self.epoch}.{self._seq}"

    @property
    def buffered_bytes(self) -> int:
        """The text the buffer holds now."""
        return self._bytes

    def publish(self, kind: str, data: dict[str, Any], *, view: str | None = None) -> FeedEvent:
        """Publish an event; ``view`` names what it is a whole snapshot of, so that it
        supersedes the previous snapshot of the same name."""
        self._seq += 1
        event_id = f"{self.epoch}.{self._seq}"
        run_id = data.get("run_id")
        text = sse_frame(event_id, kind, data)
        event = FeedEvent(
            self._seq, kind, event_id, run_id if isinstance(run_id, str) else None, text, view
        )
        if view is not None:
            previous = self._views.get(view)
            if previous is not None:
                self._bytes -= len(previous.text)
                previous.text = b""
            self._views[view] = event
        self._events.append(event)
        self._bytes += len(text)
        while len(self._events) > 1 and (
            len(self._events) > self._capacity or self._bytes > self._max_bytes
        ):
            oldest = self._events.popleft()
            self._bytes -= len(oldest.text)
            if oldest.view is not None and self._views.get(oldest.view) is oldest:
                del self._views[oldest.view]
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None
        return event

    def position(self, last_event_id: str | None) -> Position:
        """Where a subscriber that last saw ``last_event_id`` resumes.

        ``None`` is a new subscriber: from now on. ValueError for an id that is not one
        of this feed's form at all.
        """
        if last_event_id is None:
            return Position(self._seq)
        epoch, dot, number = last_event_id.strip().partition(".")
        if not dot or not number.isdigit():
            raise ValueError("must be an event id this feed sent, EPOCH.NUMBER")
        seq = int(number)
        if epoch != self.epoch or seq > self._seq:
            return Position(self._seq, "the engine restarted since that event")
        oldest = self._events[0].seq if self._events else self._seq + 1
        if seq < oldest - 1:
            return Position(self._seq, "too far behind: the events after that one are gone")
        return Position(seq)

    def after(self, seq: int) -> list[FeedEvent]:
        """The buffered events after ``seq`` (all of them, once :meth:`position` allowed it)."""
        if seq >= self._seq or not self._events:
            return []
        start = max(0, seq + 1 - self._events[0].seq)
        return list(islice(self._events, start, None))

    def fell_behind(self, seq: int) -> bool:
        """Whether events after ``seq`` have already left the buffer."""
        return bool(self._events) and seq < self._events[0].seq - 1

    def close(self) -> None:
        self.closed = True
        if self._arrived is not None:
            self._arrived.set()
            self._arrived = None

    async def wait_after(self, seq: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an event after ``seq`` (or the feed's end);
        whether one came."""
        if seq < self._seq or self.closed:
            return True
        if self._arrived is None:
            self._arrived = asyncio.Event()
        arrived = self._arrived
        try:
            async with self._clock.timeout(timeout):
                await arrived.wait()
        except TimeoutError:
            return False
        return True
