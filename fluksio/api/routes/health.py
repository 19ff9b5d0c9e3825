"""``GET /health``: unauthenticated liveness, with the engine's version."""

from __future__ import annotations

from importlib.metadata import version

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.wire.answers.resources import Health

__all__ = ["routes"]


routes = Routes()


@routes.get("/health", auth="none", answer=Health)
async def _health(call: Call[None]) -> Health:
    """Liveness, and the engine's version"""
    return Health(version=version("fluksio"), public_url=call.app[ENGINE].settings.public_url)
