"""Time as the provisioning driver sees it: a reading and timers, handed in.

The engine uses :class:`LoopClock` (wall-clock readings, the event loop's timers); tests
hand the driver a clock they advance by hand, so timeouts, polls and backoff are tested
without waiting for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "LoopClock", "Timer"]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch: requests keep and show these times."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` once, ``delay`` seconds from now, unless cancelled first."""
        ...


class LoopClock:
    """The wall clock and the running event loop's timers."""

    def now(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)
