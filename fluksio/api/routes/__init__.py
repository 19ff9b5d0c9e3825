"""HTTP routes of the engine, one module per resource, all under ``/api/v1``."""

from __future__ import annotations

from aiohttp import web

from fluksio.api import screen
from fluksio.api.declare import API_PREFIX
from fluksio.api.routes import (
    artifacts,
    description,
    events,
    flows,
    health,
    items,
    login,
    logs,
    metrics,
    personal_tokens,
    provisioners,
    runs,
    secrets,
    worker_tokens,
    workers,
)

__all__ = ["API_PREFIX", "ROUTE_TABLES", "add_routes"]

ROUTE_TABLES = (
    health.routes,
    login.routes,
    worker_tokens.routes,
    personal_tokens.routes,
    workers.routes,
    provisioners.routes,
    flows.routes,
    runs.routes,
    items.routes,
    logs.routes,
    secrets.routes,
    artifacts.routes,
    events.routes,
    metrics.outside_api,
    metrics.routes,
    description.routes,
    screen.routes,
)


def add_routes(app: web.Application) -> None:
    for table in ROUTE_TABLES:
        app.router.add_routes(table.route_defs())
    app[description.DOCUMENT] = {}
