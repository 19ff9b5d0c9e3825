"""How many frames a worker may send: a token bucket, so a flood ends its own socket.

A healthy worker sends a heartbeat per running call every 10 s, its calls' events and one
answer per call: hundreds of frames a second at the most. One that sends far more (a bug,
or a hostile host) would take the event loop from every other worker and client, so past
its budget its socket is closed with a reason and nothing else is affected.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FrameBudget"]


class FrameBudget:
    """``rate`` frames a second on average, ``burst`` at once; ``clock`` reads seconds."""

    __slots__ = ("_burst", "_clock", "_last", "_rate", "_tokens")

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._clock = clock
        self._last = clock()

    def spend(self) -> bool:
        """Take one frame's token; False once the budget is spent."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
