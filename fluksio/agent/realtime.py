"""What stays on real time whatever clock the call machinery is given, and nothing else.

The launcher decides on its clock: a call's silence ``timeout``, its ``limit`` and the
grace after it, the end of a process that answered and lingers. A test moves that clock
and sees a call stopped at its limit without waiting for it. Two kinds of time are not
decisions and stay real, here and only here:

- **pacing of I/O**: how long a pipe's small writes are let gather before they are read,
  when a batch of output lines is handed on, how fast a call's lines may flow;
- **deadlines of processes starting and stopping**: a fork server's hello, its exit, a
  call's exit status after its answer. A moved clock must not let them pass early (a
  server would be given up as it starts) nor hold them forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

# Named with their module's name: the standalone agent joins the agent's modules into one
# file, where these become globals beside everyone else's.

__all__ = ["realtime_after", "realtime_monotonic", "realtime_within"]

Result = TypeVar("Result")


def realtime_monotonic() -> float:
    """Seconds on the machine's monotonic clock: for a rate, never for a decision."""
    return time.monotonic()


def realtime_after(delay: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
    """Call ``callback`` after ``delay`` real seconds (I/O pacing)."""
    return asyncio.get_running_loop().call_later(delay, callback)


async def realtime_within(seconds: float, awaitable: Awaitable[Result]) -> Result:
    """``awaitable``'s result, or ``TimeoutError`` after ``seconds`` real seconds."""
    return await asyncio.wait_for(awaitable, seconds)
