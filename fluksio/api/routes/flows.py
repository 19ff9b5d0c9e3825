"""Flows: ``PUT/GET/DELETE /flows/{name}``, ``GET /flows``, ``POST /flows/{name}/runs``."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import DISPATCHER, FLOWS
from fluksio.api.auth import require_superuser
from fluksio.api.bodies import path_name, read_json
from fluksio.api.openapi import Operation, documented
from fluksio.api.responses import Deleted, model_response
from fluksio.api.routes.runs import RunBody, run_body
from fluksio.api.timefmt import utc
from fluksio.engine.errors import NotFound
from fluksio.engine.runs.models import FlowSpec, RunRequest
from fluksio.engine.runs.store import FlowRecord
from fluksio.engine.runs.validation import check_flow

__all__ = ["routes"]


class FlowBody(BaseModel):
    name: str
    nodes: list[dict[str, Any]]
    """As stored: canonical field names (``worker``, never the ``device`` alias)."""
    created_at: datetime
    updated_at: datetime


class FlowSummary(BaseModel):
    name: str
    nodes: int
    updated_at: datetime


def _view(record: FlowRecord) -> FlowBody:
    return FlowBody(
        name=record.name,
        nodes=record.spec["nodes"],
        created_at=utc(record.created_at),
        updated_at=utc(record.updated_at),
    )


@documented(
    Operation(
        summary="Create or replace a flow (201 when new)",
        auth="superuser",
        answer=FlowBody,
        body=FlowSpec,
        errors=(422,),
        other_answers={201: "Created."},
    )
)
async def _put(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    flow = await read_json(request, FlowSpec)
    await asyncio.get_running_loop().run_in_executor(None, check_flow, flow)
    flows = request.app[FLOWS]
    created = flows.put(name, flow.model_dump(mode="json"))
    record = flows.get(name)
    assert record is not None
    return model_response(_view(record), status=201 if created else 200)


@documented(
    Operation(
        summary="One flow",
        auth="superuser",
        answer=FlowBody,
        errors=(404, 422),
    )
)
async def _get(request: web.Request) -> web.Response:
    require_superuser(request)
    record = request.app[FLOWS].get(path_name(request))
    if record is None:
        raise NotFound(f"no flow named {request.match_info['name']!r}")
    return model_response(_view(record))


@documented(
    Operation(
        summary="Delete a flow",
        auth="superuser",
        answer=Deleted,
        errors=(404, 422),
    )
)
async def _delete(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    if not request.app[FLOWS].delete(name):
        raise NotFound(f"no flow named {name!r}")
    return model_response(Deleted(deleted=name))


@documented(
    Operation(
        summary="Every flow",
        auth="superuser",
        answer=FlowSummary,
        many=True,
    )
)
async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    return model_response(
        [
            FlowSummary(name=r.name, nodes=len(r.spec["nodes"]), updated_at=utc(r.updated_at))
            for r in request.app[FLOWS].all()
        ]
    )


@documented(
    Operation(
        summary="Start a run of a flow",
        auth="superuser",
        answer=RunBody,
        status=201,
        body=RunRequest,
        errors=(404, 422),
    )
)
async def _start_run(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    body = await read_json(request, RunRequest) if request.can_read_body else RunRequest()
    run = request.app[DISPATCHER].start_run(name, body.params)
    return model_response(run_body(run), status=201)


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/flows", _list),
        web.put(f"{prefix}/flows/{{name}}", _put),
        web.get(f"{prefix}/flows/{{name}}", _get),
        web.delete(f"{prefix}/flows/{{name}}", _delete),
        web.post(f"{prefix}/flows/{{name}}/runs", _start_run),
    ]
