"""Bounded waits: poll a condition until a deadline, never sleep as synchronisation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tests.support.clock import ManualClock

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.02
) -> T:
    """Return the first truthy value of ``condition()``; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


async def async_wait_for(
    condition: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.01
) -> T:
    """:func:`wait_for` for coroutines: polls without blocking the event loop."""

    async def checked() -> T | None:
        return condition()

    return await poll_async(checked, timeout=timeout, what=what, interval=interval)


async def poll_async(
    condition: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.02,
) -> T:
    """:func:`async_wait_for` for a condition that is itself a coroutine (an API call)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


async def advance_until(
    clock: ManualClock,
    step_s: float,
    condition: Callable[[], Awaitable[T | None]],
    *,
    timeout: float,
    what: str,
) -> T:
    """Move a manual clock on ``step_s`` at a time until ``condition()`` holds: the engine's
    time passes as fast as it keeps up, and the real wait is bounded by ``timeout``."""
    looked = False

    async def after_a_step() -> T | None:
        nonlocal looked
        if looked:
            clock.advance(step_s)
        looked = True
        return await condition()

    return await poll_async(after_a_step, timeout=timeout, what=what, interval=0.01)
