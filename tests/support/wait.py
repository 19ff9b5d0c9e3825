"""Bounded waits: poll a condition until a deadline, never sleep as synchronisation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

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
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


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
