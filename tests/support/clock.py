"""A clock tests advance by hand: timers fire when the test says time has passed."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["ManualClock"]


@dataclass(order=True)
class _Timer:
    due: float
    order: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Implements :class:`fluksio.clock.Clock`; starts at ``start``."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._timers: list[_Timer] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + max(0.0, delay), next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await woken
        finally:
            timer.cancel()

    @asynccontextmanager
    async def timeout(self, seconds: float) -> AsyncIterator[object]:
        # asyncio's own deadline machinery, set off when this clock says time is up.
        async with asyncio.timeout(None) as deadline:
            expire = asyncio.get_running_loop().time
            timer = self.call_later(seconds, lambda: deadline.reschedule(expire()))
            try:
                yield deadline
            finally:
                timer.cancel()

    def advance(self, seconds: float) -> None:
        """Move time on, firing every timer that falls due, in order, at its own time."""
        until = self._now + seconds
        while self._timers and self._timers[0].due <= until:
            timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, timer.due)
            timer.callback()
        self._now = until

    def pending(self) -> list[float]:
        """When the timers still armed fall due (for asserting what is scheduled)."""
        return sorted(t.due for t in self._timers if not t.cancelled)
