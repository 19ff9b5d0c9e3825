"""A running call's output as numbered lines, handed on in batches while it runs, bounded.

Its stdout and stderr (one pipe) are cut into lines; line *n* is the *n*-th the call wrote,
from 0, whether or not it is sent. Lines are gathered for :data:`BATCH_S` and handed on
as one batch ``(first, lines)``; a batch is contiguous, so a line not sent shows as a gap
between two batches' positions, never as a silent loss.

What bounds it, per call: a token bucket of :data:`BYTES_PER_S` with a burst of
:data:`BURST_BYTES` (a line costs its bytes and one). A line that finds the bucket empty is
dropped: counted by the gap it leaves, never kept; and so is every line after it until
the bucket holds :data:`RESUME_BYTES` again. A line longer than :data:`LINE_BYTES`
is cut there (the rest starts the next line). So a node printing a flood costs the
worker, the socket and the engine at most that rate, and its complete output still comes
back with its result, under the launcher's 1 MiB rule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fluksio.agent.realtime import realtime_after, realtime_monotonic

__all__ = ["BATCH_S", "BURST_BYTES", "BYTES_PER_S", "LINE_BYTES", "LiveOutput"]

BATCH_S = 0.1
"""How long lines are gathered before they are handed on together."""
BATCH_BYTES = 64 << 10
"""A batch is handed on at once when it reaches this size."""
BYTES_PER_S = 256 << 10
"""The rate a call's lines are handed on at, at most, over time."""
BURST_BYTES = 1 << 20
"""What a call may hand on at once after a quiet while."""
RESUME_BYTES = 64 << 10
"""Once a line is dropped, lines are dropped until the bucket holds this much again."""
LINE_BYTES = 8 << 10
"""A longer line is cut into lines of this size."""

Batch = Callable[[int, list[str]], None]
"""Receives ``(first, lines)``: the position of the first line, and the lines."""


class LiveOutput:
    """Cuts a call's output into lines and hands them to ``send`` in bounded batches."""

    def __init__(self, send: Batch, *, clock: Callable[[], float] = realtime_monotonic) -> None:
        self._send = send
        self._clock = clock
        self._partial = bytearray()
        self._next = 0
        """The position the next line will have."""
        self._sent_to = 0
        """The position after the last line handed on (or passed over in a gap)."""
        self._batch: list[str] = []
        self._batch_first = 0
        self._batch_bytes = 0
        self._tokens = float(BURST_BYTES)
        self._filled_at = clock()
        self._dropping = False
        self._due: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def lines(self) -> int:
        """How many lines the call has written so far."""
        return self._next

    def add(self, data: bytes) -> None:
        if self._closed:
            return
        self._partial += data
        partial = self._partial
        start = 0
        while True:
            newline = partial.find(b"\n", start)
            if newline < 0:
                break
            if not self._line(bytes(partial[start:newline])):
                # The bucket is empty: the rest of what came now is dropped, counted in
                # bulk (a flood must cost the reader little more than reading it).
                last = partial.rfind(b"\n")
                self._next += partial.count(b"\n", newline + 1, last + 1)
                start = last + 1
                break
            start = newline + 1
        del partial[:start]
        while len(partial) >= LINE_BYTES:
            self._line(bytes(partial[:LINE_BYTES]))
            del partial[:LINE_BYTES]

    def close(self) -> None:
        """The call ended: its last line, if unfinished, and what is gathered go now; a
        gap at the end is said with an empty batch at the end position."""
        if self._closed:
            return
        if self._partial:
            self._line(bytes(self._partial))
            self._partial.clear()
        self.flush()
        if self._sent_to < self._next:
            self._send(self._next, [])
            self._sent_to = self._next
        self._closed = True

    def flush(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._batch:
            batch, self._batch = self._batch, []
            self._batch_bytes = 0
            self._sent_to = self._batch_first + len(batch)
            self._send(self._batch_first, batch)

    def _line(self, raw: bytes) -> bool:
        """Number a line, and gather it if the bucket allows; whether it was kept."""
        position = self._next
        self._next += 1
        now = self._clock()
        self._tokens = min(BURST_BYTES, self._tokens + (now - self._filled_at) * BYTES_PER_S)
        self._filled_at = now
        cost = len(raw) + 1
        if self._dropping and self._tokens >= RESUME_BYTES:
            self._dropping = False
        if self._dropping or self._tokens < cost:
            # Dropped until the bucket holds RESUME_BYTES again, so that a flood makes a
            # few long gaps a second, not one between every two lines. What was gathered
            # goes first, so the gap falls between two batches.
            self._dropping = True
            self.flush()
            return False
        self._tokens -= cost
        if not self._batch:
            self._batch_first = position
        self._batch.append(raw.decode(errors="replace"))
        self._batch_bytes += cost
        if self._batch_bytes >= BATCH_BYTES:
            self.flush()
        elif self._due is None:
            self._due = realtime_after(BATCH_S, self.flush)
        return True
