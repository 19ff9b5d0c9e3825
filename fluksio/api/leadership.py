"""Several engines on one PostgreSQL database: each is a standby until the lease is its own
(:mod:`fluksio.engine.postgres.lease`), then the active engine while it renews it.

A standby listens on the engine's port all the same, and answers everything with 503 and
a sentence naming the active engine (``/healthz/ready`` too, so that a balancer sends
traffic to the active one; ``/healthz/live`` is 200; both under ``/api/v1``). It tries
for the lease every :data:`TRY_SHARE` of its length. Once it holds it, the standby's
server stops and the engine starts on the same socket: a connection made meanwhile waits
in the socket's backlog, never refused.

The active engine renews every third of the lease's length. One that finds the lease
taken, or cannot renew it before its own reckoning of the lease runs out (paused, cut off
from the database), steps down at once: it says so and exits (code 3), leaving its state
as a crash would, so that the engine now active adopts its workers' calls and finds its
provisioned jobs; a service manager that restarts it makes it a standby. It stops nothing
on its way out (no job is cancelled that the other engine now owns).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import sys
import threading
from importlib.metadata import version

from aiohttp import web

from fluksio.api.declare import API_PREFIX
from fluksio.clock import SYSTEM_CLOCK
from fluksio.engine.postgres.fence import Fence
from fluksio.engine.postgres.lease import Lease
from fluksio.engine.postgres.opening import connector
from fluksio.engine.settings import EngineSettings
from fluksio.errors import StoreAway
from fluksio.logs import get_logger
from fluksio.wire.answers.resources import ErrorBody

__all__ = ["STEPPED_DOWN_EXIT", "TRY_SHARE", "Leadership"]

log = get_logger(__name__)
TRY_SHARE = 0.2
"""A standby tries for the lease every this much of its length."""
RENEW_SHARE = 1 / 3
HELD_SHARE = 0.9
"""Of the lease's length after it was asked for, how long it is counted surely held: a
margin for the two machines' clocks' rates and the round trip."""
RETRY_S = 0.5
"""After a renewal that failed, the next is tried this soon."""
STEPPED_DOWN_EXIT = 3


class Leadership:
    def __init__(self, settings: EngineSettings, address: str) -> None:
        assert settings.database is not None
        holder = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self.lease = Lease(
            connector(settings.database, settings.database_password_file),
            holder=holder,
            address=address,
            length_s=settings.lease_s,
        )
        self._stepping_down = threading.Lock()
        self._taken_at = SYSTEM_CLOCK.monotonic()

    async def standby_until_active(
        self, listener: socket.socket, context: ssl.SSLContext | None, stop: asyncio.Event
    ) -> Fence | None:
        """Serve as a standby on ``listener`` until the lease is this engine's: its fence,
        or None when ``stop`` came first."""
        epoch = await self._try()
        if epoch is not None:
            return self._fence(epoch)
        runner = web.AppRunner(self._standby_app(), access_log=None, handle_signals=False)
        await runner.setup()
        # A duplicate of the socket: stopping this server closes it, not the listener.
        site = web.SockSite(runner, listener.dup(), ssl_context=context)
        await site.start()
        log.info("engine.standby", holder=self.lease.holder, lease_s=self.lease.length_s)
        try:
            while epoch is None:
                with contextlib.suppress(TimeoutError):
                    async with SYSTEM_CLOCK.timeout(self.lease.length_s * TRY_SHARE):
                        await stop.wait()
                if stop.is_set():
                    return None
                epoch = await self._try()
        finally:
            await runner.cleanup()
        return self._fence(epoch)

    async def keep(self, fence: Fence) -> None:
        """Renew the lease while the engine runs; step down once it is not sure to hold it.
        A renewal that fails (the database restarting) is tried again every
        :data:`RETRY_S` until the lease would have run out."""
        length = self.lease.length_s
        renewed_at = self._taken_at
        wait = length * RENEW_SHARE
        while True:
            await SYSTEM_CLOCK.sleep(wait)
            asked_at = SYSTEM_CLOCK.monotonic()
            try:
                held = await asyncio.to_thread(self.lease.renew, fence.epoch)
            except StoreAway as away:
                if SYSTEM_CLOCK.monotonic() - renewed_at >= length * HELD_SHARE:
                    self.step_down(f"it could not renew its lease for {length:g} s ({away})")
                log.warning("engine.lease_not_renewed", error=away.detail)
                wait = RETRY_S
                continue
            if not held:
                self.step_down("another engine holds its lease now")
            if asked_at - renewed_at > length * HELD_SHARE:
                # Renewed, but after a pause longer than the lease: another engine may have
                # taken it meanwhile and let it go; what this one holds in memory is stale.
                self.step_down("it was paused past its lease")
            # Counted from before the renewal was sent: the database's expiry is later.
            fence.renewed(asked_at + length * HELD_SHARE)
            renewed_at, wait = asked_at, length * RENEW_SHARE

    def step_down(self, why: str) -> None:
        """Say so and exit at once, writing and stopping nothing more."""
        with self._stepping_down:
            log.error("engine.stepped_down", why=why, holder=self.lease.holder)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(STEPPED_DOWN_EXIT)

    async def _try(self) -> int | None:
        self._taken_at = SYSTEM_CLOCK.monotonic()  # before: the lease runs from the take
        try:
            return await asyncio.to_thread(self.lease.take)
        except StoreAway as away:
            log.warning("engine.lease_unreadable", error=away.detail)
            return None

    def _fence(self, epoch: int) -> Fence:
        log.info("engine.active", epoch=epoch, holder=self.lease.holder)
        return Fence(epoch, self.step_down, self._taken_at + self.lease.length_s * HELD_SHARE)

    def _standby_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(f"{API_PREFIX}/healthz/live", self._live)
        app.router.add_route("*", "/{path:.*}", self._refuse)
        return app

    async def _live(self, _request: web.Request) -> web.Response:
        return web.json_response({"version": version("fluksio"), "active": False})

    async def _refuse(self, _request: web.Request) -> web.Response:
        try:
            found = await asyncio.to_thread(self.lease.read)
        except StoreAway:
            found = None
        active = (
            f"the active engine is {found.address}"
            if found is not None and found.left_s >= 0
            else "no engine is active now (one takes over within seconds)"
        )
        detail = f"this engine is a standby: {active}; send requests there or through a balancer"
        body = ErrorBody(detail=detail).model_dump_json(exclude_none=True)
        return web.Response(
            status=503, text=body, content_type="application/json", headers={"Retry-After": "2"}
        )
