"""``GET /health``: unauthenticated liveness, with the engine's version."""

from __future__ import annotations

from importlib.metadata import version

from aiohttp import web

__all__ = ["routes"]


async def _health(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "version": version("fluksio")})


def routes(prefix: str) -> list[web.RouteDef]:
    return [web.get(f"{prefix}/health", _health)]
