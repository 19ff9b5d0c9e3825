"""What this worker's artifact cache holds, told to the engine (a :class:`CacheFrame`),
so that a call goes where most of its inputs' bytes already are.

Bounded however large the cache: its largest entries only (inputs that matter for
placement are large), read from the cache's own folder, after the welcome and, at most
once a second, after calls or fetches ahead that may have changed it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from fluksio.agent import runner
from fluksio.agent.clock import Clock
from fluksio.agent.protocol.frames import (
    CACHE_REPORTED,
    CACHE_REPORTED_FROM_BYTES,
    IMAGE_HELD,
    CacheFrame,
)

__all__ = ["CacheReport", "cache_holds"]

REPORT_AFTER_S = 1.0
CacheSend = Callable[[CacheFrame], Awaitable[None]]


def cache_holds(root: str) -> list[str]:
    """The digests of the largest entries under ``root`` (``sha256/xx/<hex>``), largest
    first, at most :data:`CACHE_REPORTED` of at least :data:`CACHE_REPORTED_FROM_BYTES`."""
    found: list[tuple[int, str]] = []
    try:
        folders = os.scandir(os.path.join(root, "sha256"))
    except OSError:
        return []
    with folders:
        for folder in folders:
            try:
                entries = os.scandir(folder.path)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    if len(entry.name) != 64 or "." in entry.name:
                        continue  # a download under way (``<hex>.<pid>.part``)
                    try:
                        size = entry.stat().st_size
                    except OSError:
                        continue
                    if size >= CACHE_REPORTED_FROM_BYTES:
                        found.append((size, entry.name))
    found.sort(reverse=True)
    return [f"sha256:{name}" for _size, name in found[:CACHE_REPORTED]]


class CacheReport:
    """Tells the engine what the cache holds whenever it may have changed (once a
    second at most, and only when it did); ``send`` writes a frame on the socket."""

    def __init__(
        self,
        clock: Clock,
        settings: dict[str, str],
        images: Callable[[], list[str]] = list,
    ) -> None:
        """``images``: the container images it holds ready, told beside the cache."""
        self._images = images
        self._clock = clock
        self._root = runner.artifact_cache_dir(settings)
        self._told: list[str] | None = None
        self._due: asyncio.Task[None] | None = None

    def reset(self) -> None:
        """A new connection: nothing has been told on it."""
        self._told = None

    def changed(self, send: CacheSend) -> None:
        if self._due is None or self._due.done():
            self._due = asyncio.get_running_loop().create_task(self._later(send))

    async def tell(self, send: CacheSend) -> None:
        holds = await asyncio.to_thread(cache_holds, self._root)
        holds += [IMAGE_HELD + image for image in self._images()]
        if holds != self._told:
            self._told = holds
            await send(CacheFrame(holds=holds))

    async def _later(self, send: CacheSend) -> None:
        await self._clock.sleep(REPORT_AFTER_S)
        await self.tell(send)
