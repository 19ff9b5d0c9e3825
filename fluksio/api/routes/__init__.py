"""HTTP routes of the engine, one module per resource, all under ``/api/v1``."""

from __future__ import annotations

from aiohttp import web

from fluksio.api import screen
from fluksio.api.routes import (
    artifacts,
    description,
    events,
    flows,
    health,
    login,
    metrics,
    runs,
    secrets,
    worker_tokens,
    workers,
)

__all__ = ["API_PREFIX", "ROUTE_MODULES", "add_routes"]

API_PREFIX = "/api/v1"
ROUTE_MODULES = (
    health,
    login,
    worker_tokens,
    workers,
    flows,
    runs,
    secrets,
    artifacts,
    events,
    metrics,
    description,
    screen,
)


def add_routes(app: web.Application) -> None:
    for module in ROUTE_MODULES:
        app.router.add_routes(module.routes(API_PREFIX))
    app[description.DOCUMENT] = {}
