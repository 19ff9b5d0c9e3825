"""Flows: ``PUT/GET/DELETE /flows/{name}``, ``GET /flows``, ``POST /flows/{name}/runs``."""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.bodies import path_name
from fluksio.api.declare import Answered, Call, Param, Routes
from fluksio.api.routes.runs import RunBody
from fluksio.errors import InvalidInput
from fluksio.wire.answers.flows import FlowBody, FlowSummary
from fluksio.wire.answers.resources import Deleted
from fluksio.wire.flows import FlowSpec, RunRequest

__all__ = ["routes"]

routes = Routes()


@routes.get("/flows", auth="user", answer=FlowSummary, many=True)
async def _list(call: Call[None]) -> list[FlowSummary]:
    """Every flow"""
    return call.app[ENGINE].flow_list()


@routes.put(
    "/flows/{name}",
    auth="user",
    answer=FlowBody,
    body=FlowSpec,
    errors=(422,),
    other_answers={201: "Created."},
    params=(
        Param(
            "transient",
            "true: made for one script's calls; the retention deletes it once no kept run"
            " is of it (as the Python executor's flows are).",
            schema={"type": "boolean"},
        ),
    ),
)
async def _put(call: Call[FlowSpec]) -> FlowBody | Answered:
    """Create or replace a flow (201 when new)"""
    transient = call.request.query.get("transient", "false")
    if transient not in ("true", "false"):
        raise InvalidInput("transient", "must be true or false")
    flow, created = await call.app[ENGINE].put_flow(
        path_name(call.request), call.body, transient=transient == "true"
    )
    return Answered(flow, 201) if created else flow


@routes.get("/flows/{name}", auth="user", answer=FlowBody, errors=(404, 422))
async def _get(call: Call[None]) -> FlowBody:
    """One flow"""
    return call.app[ENGINE].flow(path_name(call.request))


@routes.delete("/flows/{name}", auth="user", answer=Deleted, errors=(404, 422))
async def _delete(call: Call[None]) -> Deleted:
    """Delete a flow"""
    return call.app[ENGINE].delete_flow(path_name(call.request))


@routes.post(
    "/flows/{name}/runs",
    auth="user",
    answer=RunBody,
    status=201,
    body=RunRequest,
    body_optional=True,
    errors=(404, 422),
)
async def _start_run(call: Call[RunRequest]) -> RunBody:
    """Start a run of a flow"""
    return await call.app[ENGINE].start_run(path_name(call.request), call.body.params)
