"""A clock tests advance by hand: timers fire when the test says time has passed."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
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
    """Implements :class:`fluksio.provisioners.clock.Clock`; starts at ``start``."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._timers: list[_Timer] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(self._now + max(0.0, delay), next(self._order), callback)
        heapq.heappush(self._timers, timer)
        return timer

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
