"""Secrets: ``PUT /secrets/{name}`` {value, labels}, ``GET /secrets`` (never values), delete."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import SECRETS
from fluksio.api.auth import require_superuser
from fluksio.api.bodies import path_name, read_json
from fluksio.api.openapi import Operation, documented
from fluksio.api.responses import Deleted, model_response
from fluksio.api.timefmt import utc
from fluksio.engine.errors import NotFound
from fluksio.engine.runs.models import SecretRequest
from fluksio.engine.secrets import SecretInfo

__all__ = ["routes"]


class SecretBody(BaseModel):
    """A secret as the API shows it: never its value."""

    name: str
    labels: list[str]
    created_at: datetime
    updated_at: datetime


def _view(info: SecretInfo) -> SecretBody:
    return SecretBody(
        name=info.name,
        labels=list(info.labels),
        created_at=utc(info.created_at),
        updated_at=utc(info.updated_at),
    )


@documented(
    Operation(
        summary="Create or replace a secret",
        auth="superuser",
        answer=SecretBody,
        body=SecretRequest,
        errors=(422,),
    )
)
async def _put(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    body = await read_json(request, SecretRequest)
    return model_response(_view(request.app[SECRETS].put(name, body.value, body.labels)))


@documented(
    Operation(
        summary="Every secret, never its value",
        auth="superuser",
        answer=SecretBody,
        many=True,
    )
)
async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    return model_response([_view(info) for info in request.app[SECRETS].list()])


@documented(
    Operation(
        summary="Delete a secret",
        auth="superuser",
        answer=Deleted,
        errors=(404, 422),
    )
)
async def _delete(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    if not request.app[SECRETS].delete(name):
        raise NotFound(f"no secret named {name!r}")
    return model_response(Deleted(deleted=name))


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/secrets", _list),
        web.put(f"{prefix}/secrets/{{name}}", _put),
        web.delete(f"{prefix}/secrets/{{name}}", _delete),
    ]
