"""The engine's reading of what each site allows its profiles: one loop per provisioner,
started at the first :class:`~fluksio.provisioners.machine.effects.ReadSite`, reading
:meth:`~fluksio.provisioners.provisioner.Provisioner.site_limits` then and every
:data:`SITE_LIMITS_EVERY_S` after, and handing each answer to the provisioning machine."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from fluksio.clock import Clock
from fluksio.logs import get_logger
from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.provisioner import Provisioner

__all__ = ["SITE_LIMITS_EVERY_S", "SITE_READ_WITHIN_S", "SiteReader"]

log = get_logger(__name__)

SITE_READ_WITHIN_S = 60.0
"""A reading that has not ended by then counts as failed (``sacctmgr`` hanging on a
slurmdbd that does not answer): the last reading stands, and the next is tried later."""
SITE_LIMITS_EVERY_S = 300.0
"""How often a provisioner's site limits are read again once it has been asked for a
machine: a site's administrators change them rarely, and each reading is a remote command."""


class SiteReader:
    """``read(name, limits)`` hears each reading; ``unread(name)`` each that failed (the
    last one stands)."""

    def __init__(
        self,
        provisioners: Mapping[str, Provisioner[Any, Any]],
        clock: Clock,
        *,
        read: Callable[[str, Mapping[str, SiteLimit]], None],
        unread: Callable[[str], None],
        within_s: float = SITE_READ_WITHIN_S,
    ) -> None:
        self._provisioners = provisioners
        self._clock = clock
        self._read = read
        self._unread = unread
        self._within_s = within_s
        self._loops: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str) -> None:
        """Read provisioner ``name``'s site from now on (once started, it goes on)."""
        if name not in self._loops:
            self._loops[name] = asyncio.ensure_future(self._loop(name))

    def stop(self) -> None:
        for loop in self._loops.values():
            loop.cancel()

    async def _in_time(self, provisioner: Provisioner[Any, Any]) -> Mapping[str, SiteLimit]:
        """The site's reading, or :class:`TimeoutError` past ``within_s`` (by the engine's
        clock, as every wait of the provisioning is)."""
        async with self._clock.timeout(self._within_s):
            return await provisioner.site_limits()

    async def _loop(self, name: str) -> None:
        provisioner = self._provisioners[name]
        while True:
            try:
                limits = await self._in_time(provisioner)
            except Exception as exc:
                error = str(exc) or type(exc).__name__
                if isinstance(exc, TimeoutError):
                    error = f"no answer within {self._within_s:g} s"
                log.warning("provision.site_limits_unread", provisioner=name, error=error)
                self._unread(name)
            else:
                self._read(name, limits)
            await self._clock.sleep(SITE_LIMITS_EVERY_S)
