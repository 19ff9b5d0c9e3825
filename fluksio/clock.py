"""The engine's one clock, as the engine names it: every reading of time and every timer.

Declared in :mod:`fluksio.agent.clock` (standard library only; the agent, installed
alone, runs on it too), so that one manual clock in the tests drives either side.
"""

from __future__ import annotations

from fluksio.agent.clock import SYSTEM_CLOCK, Clock, SystemClock, Timer

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "Timer"]
