"""Secrets: ``PUT /secrets/{name}`` {value, labels}, ``GET /secrets`` (never values), delete."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import SECRETS
from fluksio.api.auth import require_superuser
from fluksio.api.bodies import path_name, read_json
from fluksio.api.errors import NotFound
from fluksio.api.runs.models import SecretRequest
from fluksio.api.secrets import SecretInfo
from fluksio.api.timefmt import iso8601

__all__ = ["routes"]


def _view(info: SecretInfo) -> dict[str, object]:
    return {
        "name": info.name,
        "labels": list(info.labels),
        "created_at": iso8601(info.created_at),
        "updated_at": iso8601(info.updated_at),
    }


async def _put(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    body = await read_json(request, SecretRequest)
    return web.json_response(_view(request.app[SECRETS].put(name, body.value, body.labels)))


async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    return web.json_response([_view(info) for info in request.app[SECRETS].list()])


async def _delete(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    if not request.app[SECRETS].delete(name):
        raise NotFound(f"no secret named {name!r}")
    return web.json_response({"deleted": name})


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/secrets", _list),
        web.put(f"{prefix}/secrets/{{name}}", _put),
        web.delete(f"{prefix}/secrets/{{name}}", _delete),
    ]
