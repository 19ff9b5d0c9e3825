"""The clock: every reading of time and every timer of the engine and the agent.

Both run on :class:`SystemClock` (the wall clock, a monotonic reading for durations, the
event loop's timers). Tests hand either one a clock they advance by hand, so liveness,
backoff, drain, idle release and token expiry are tested without waiting. It lives in the
agent, standard library only, because the agent is installed alone; the engine reads it
as ``fluksio.clock``. ``tests/test_code_rules.py`` holds both to it: nothing else reads
time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "Timer"]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch: what rows, tokens and the screen keep and show."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never goes back: for how long things take."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` once, ``delay`` seconds from now, unless cancelled first."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return ``seconds`` from now (a loop's pace: pings, the workers' watch)."""
        ...

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        """Like :func:`asyncio.timeout`: what the block awaits is cancelled ``seconds``
        from now, and the block raises :class:`TimeoutError`."""
        ...


class SystemClock:
    """The wall clock, the monotonic clock and the running event loop's timers."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def timeout(self, seconds: float) -> AbstractAsyncContextManager[object]:
        return asyncio.timeout(seconds)


SYSTEM_CLOCK = SystemClock()
"""The clock of a process that is given none: the CLI's commands, a store opened alone,
the agent."""
