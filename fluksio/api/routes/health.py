"""``GET /health``: unauthenticated liveness, with the engine's version."""

from __future__ import annotations

from importlib.metadata import version

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import SETTINGS
from fluksio.api.openapi import Operation, documented
from fluksio.api.responses import model_response

__all__ = ["routes"]


class Health(BaseModel):
    status: str = "ok"
    version: str
    public_url: str | None
    """The engine as the world reaches it (``--public-url``), or null: as dialled."""


@documented(
    Operation(
        summary="Liveness, and the engine's version",
        auth="none",
        answer=Health,
    )
)
async def _health(request: web.Request) -> web.Response:
    public = request.app[SETTINGS].public_url
    return model_response(Health(version=version("fluksio"), public_url=public))


def routes(prefix: str) -> list[web.RouteDef]:
    return [web.get(f"{prefix}/health", _health)]
