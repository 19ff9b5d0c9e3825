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
    "/secrets/{name}", auth="superuser", answer=SecretBody, body=SecretRequest, errors=(422,)
)
async def _put(call: Call[SecretRequest]) -> SecretBody:
    """Create or replace a secret"""
    body = call.body
    return call.app[ENGINE].put_secret(path_name(call.request), body.value, body.labels)


@routes.get("/secrets", auth="superuser", answer=SecretBody, many=True)
async def _list(call: Call[None]) -> list[SecretBody]:
    """Every secret, never its value"""
    return call.app[ENGINE].secret_list()


@routes.delete("/secrets/{name}", auth="superuser", answer=Deleted, errors=(404, 422))
async def _delete(call: Call[None]) -> Deleted:
    """Delete a secret"""
    return call.app[ENGINE].delete_secret(path_name(call.request))
