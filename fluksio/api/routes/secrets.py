"""Secrets: ``PUT /secrets/{name}`` {value, labels}, ``GET /secrets`` (never values), delete."""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.bodies import path_name
from fluksio.api.declare import Call, Routes
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
    body = call.body
    return call.app[ENGINE].put_secret(path_name(call.request), body.value, body.labels)


@routes.get(
    "/secrets",
    summary="Every secret, never its value",
    auth="superuser",
    answer=SecretBody,
    many=True,
)
async def _list(call: Call[None]) -> list[SecretBody]:
    return call.app[ENGINE].secret_list()


@routes.delete(
    "/secrets/{name}",
    summary="Delete a secret",
    auth="superuser",
    answer=Deleted,
    errors=(404, 422),
)
async def _delete(call: Call[None]) -> Deleted:
    return call.app[ENGINE].delete_secret(path_name(call.request))
