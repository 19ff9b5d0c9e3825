"""``GET /health``: unauthenticated liveness, with the engine's version."""

from __future__ import annotations

from importlib.metadata import version

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.responses import model_response

__all__ = ["routes"]


class Health(BaseModel):
    status: str = "ok"
    version: str


async def _health(_request: web.Request) -> web.Response:
    return model_response(Health(version=version("fluksio")))


def routes(prefix: str) -> list[web.RouteDef]:
    return [web.get(f"{prefix}/health", _health)]
