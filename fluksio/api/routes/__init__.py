"""HTTP routes of the engine, one module per resource, all under ``/api/v1``."""

from __future__ import annotations

from aiohttp import web

from fluksio.api import screen
from fluksio.api.routes import (
    artifacts,
    flows,
    health,
    login,
    runs,
    secrets,
    worker_tokens,
    workers,
)

__all__ = ["API_PREFIX", "add_routes"]

API_PREFIX = "/api/v1"


def add_routes(app: web.Application) -> None:
    for module in (health, login, worker_tokens, workers, flows, runs, secrets, artifacts):
        app.router.add_routes(module.routes(API_PREFIX))
    app.router.add_routes(screen.routes(API_PREFIX))
