"""Secrets: ``PUT /secrets/{name}`` {value, labels}, ``GET /secrets`` (never values), delete."""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.bodies import path_name
from fluksio.api.declare import Call, Routes
from fluksio.engine.answers import secret_body
from fluksio.engine.errors import NotFound
from fluksio.wire.answers.resources import Deleted, SecretBody
from fluksio.wire.flows import SecretRequest

__all__ = ["routes"]


routes = Routes()


@routes.put(
    "/secrets/{name}",
    summary="Create or replace a secret",
    auth="superuser",
    answer=SecretBody,
    body=SecretRequest,
    errors=(422,),
)
async def _put(call: Call[SecretRequest]) -> SecretBody:
    name = path_name(call.request)
    return secret_body(call.app[ENGINE].secrets.put(name, call.body.value, call.body.labels))


@routes.get(
    "/secrets",
    summary="Every secret, never its value",
    auth="superuser",
    answer=SecretBody,
    many=True,
)
async def _list(call: Call[None]) -> list[SecretBody]:
    return [secret_body(info) for info in call.app[ENGINE].secrets.list()]


@routes.delete(
    "/secrets/{name}",
    summary="Delete a secret",
    auth="superuser",
    answer=Deleted,
    errors=(404, 422),
)
async def _delete(call: Call[None]) -> Deleted:
    name = path_name(call.request)
    if not call.app[ENGINE].secrets.delete(name):
        raise NotFound(f"no secret named {name!r}")
    return Deleted(deleted=name)
