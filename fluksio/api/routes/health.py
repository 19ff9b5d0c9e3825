"""``GET /health``, ``/healthz/live`` and ``/healthz/ready``: unauthenticated, with the
engine's version; a standby answers ``/healthz/ready`` 503 (:mod:`fluksio.api.leadership`)."""

from __future__ import annotations

from importlib.metadata import version

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.errors import StoreAway
from fluksio.wire.answers.resources import Health

__all__ = ["routes"]


routes = Routes()


@routes.get("/health", auth="none", answer=Health)
async def _health(call: Call[None]) -> Health:
    """Liveness, and the engine's version"""
    return _said(call)


def _said(call: Call[None]) -> Health:
    return Health(version=version("fluksio"), public_url=call.app[ENGINE].settings.public_url)


@routes.get("/healthz/live", auth="none", answer=Health)
async def _live(call: Call[None]) -> Health:
    """The engine process answers (a standby too)"""
    return _said(call)


@routes.get("/healthz/ready", auth="none", answer=Health)
async def _ready(call: Call[None]) -> Health:
    """This engine serves requests: 200 on the active engine; 503 on a standby (one of
    several on one database), and while its store cannot be written, for a balancer's
    health check"""
    unwritten = call.app[ENGINE].views.unwritten_runs()
    if unwritten:
        raise StoreAway(
            f"the engine cannot write its state now: the changes of {unwritten} run(s) wait"
            " in memory (its database away, or its disk full) and are written once it can"
        )
    return _said(call)
