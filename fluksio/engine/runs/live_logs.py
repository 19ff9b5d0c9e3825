"""The lines running calls write, kept while they run (and a while after), bounded.

Each call's lines arrive in batches ``(first, lines)`` (from the engine's own launcher, or
a worker's :class:`~fluksio.agent.protocol.frames.LogFrame`) and are kept by position, secrets
blanked, in a window of the newest :data:`LINES_KEPT` lines and :data:`BYTES_KEPT`
bytes. A reader asks from a position and gets the lines from there that are still kept,
with how many it missed (passed over by the worker's rate bound, or fallen out of the
window), so that a follower resumes without a gap it is not told of, or a repeat.

An ended call's window stays for the :data:`ENDED_KEPT` most recent ended calls (at most
:data:`ENDED_BYTES` together): a follower reads to the end of what it followed. After
that, a node's output is its stored record (the answer's ``logs``, 1 MiB at most).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from dataclasses import dataclass, field

from fluksio.clock import Clock
from fluksio.engine.runs.machine.redact import redact

__all__ = ["BYTES_KEPT", "ENDED_KEPT", "LINES_KEPT", "CallLines", "LiveLogs", "Read"]

LINES_KEPT = 5_000
BYTES_KEPT = 256 << 10
ENDED_KEPT = 64
ENDED_BYTES = 16 << 20


@dataclass
class CallLines:
    """One call's window of lines."""

    run_id: str
    node_id: str
    attempt: int
    lines: collections.deque[str] = field(default_factory=collections.deque)
    start: int = 0
    """The position of ``lines[0]``."""
    end: int = 0
    """The position after the last line heard of (kept or not)."""
    bytes: int = 0
    ended: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when lines arrive or it ends, then replaced: each waiter awaits the one it saw."""

    def wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def add(self, first: int, lines: list[str]) -> None:
        if first < self.end:  # a batch repeated (never by our agent): keep what is new
            lines = lines[self.end - first :]
            first = self.end
        if first > self.end:  # lines passed over: the window starts again after them
            self.lines.clear()
            self.bytes = 0
            self.start = first
        self.lines.extend(lines)
        self.bytes += sum(len(line) + 1 for line in lines)
        self.end = first + len(lines)
        while self.lines and (len(self.lines) > LINES_KEPT or self.bytes > BYTES_KEPT):
            self.bytes -= len(self.lines.popleft()) + 1
            self.start += 1
        if not self.lines:
            self.start = self.end


@dataclass(frozen=True)
class Read:
    """What a reader from a position gets: ``lines`` from ``first``, ``missed`` lines
    before them it cannot have, ``next`` to ask from next time, and whether the call has
    ended (so nothing will follow ``next``)."""

    first: int
    lines: list[str]
    missed: int
    next: int
    ended: bool


class LiveLogs:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._calls: dict[str, CallLines] = {}
        self._ended: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._ended_bytes = 0
        self._closed = False
        self._by_node: dict[tuple[str, str, int], str] = {}
        """(run, node, attempt) -> the call id of that attempt (the latest, once queued
        again because its worker never took it)."""

    def begin(self, call_id: str, run_id: str, node_id: str, attempt: int) -> None:
        self._calls[call_id] = CallLines(run_id, node_id, attempt)
        self._by_node[(run_id, node_id, attempt)] = call_id

    def add(
        self, call_id: str, first: int, lines: list[str], secrets: tuple[str, ...]
    ) -> list[str] | None:
        """Keep a batch of the call's lines; the lines as kept (secrets blanked), or None
        when the call is not one whose lines are kept."""
        call = self._calls.get(call_id)
        if call is None or call.ended:
            return None
        kept = [redact(line, secrets) for line in lines] if secrets else lines
        call.add(first, kept)
        call.wake()
        return kept

    def end(self, call_id: str) -> None:
        call = self._calls.get(call_id)
        if call is None or call.ended:
            return
        call.ended = True
        call.wake()
        self._ended[call_id] = None
        self._ended_bytes += call.bytes
        while len(self._ended) > ENDED_KEPT or self._ended_bytes > ENDED_BYTES:
            oldest, _ = self._ended.popitem(last=False)
            gone = self._calls.pop(oldest)
            self._ended_bytes -= gone.bytes
            if self._by_node.get((gone.run_id, gone.node_id, gone.attempt)) == oldest:
                del self._by_node[(gone.run_id, gone.node_id, gone.attempt)]

    @staticmethod
    def key(node_id: str, item: int | None) -> str:
        """What a call's lines are kept under: its node, or an array's item (``sweep[17]``)."""
        return node_id if item is None else f"{node_id}[{item}]"

    def call_of(self, run_id: str, node_id: str, attempt: int) -> str | None:
        """The call whose lines are kept for that attempt of that node, if any."""
        return self._by_node.get((run_id, node_id, attempt))

    def read(self, call_id: str, position: int) -> Read | None:
        call = self._calls.get(call_id)
        if call is None:
            return None
        position = min(max(position, 0), call.end)
        skip = max(0, position - call.start)
        lines = list(itertools.islice(call.lines, skip, None))
        first = max(position, call.start)
        return Read(first, lines, first - position, call.end, call.ended)

    def close(self) -> None:
        """The engine is stopping: every reader waiting is answered now, and none waits
        from now on."""
        self._closed = True
        for call in self._calls.values():
            call.wake()

    async def wait(self, call_id: str, position: int, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a line at ``position`` or after, or the end
        (or the engine's stop)."""
        call = self._calls.get(call_id)
        if call is None or call.ended or call.end > position or timeout <= 0 or self._closed:
            return
        try:
            async with self._clock.timeout(timeout):
                while not call.ended and call.end <= position and not self._closed:
                    await call.changed.wait()
        except TimeoutError:
            return
