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


@routes.get("/flows", summary="Every flow", auth="user", answer=FlowSummary, many=True)
async def _list(call: Call[None]) -> list[FlowSummary]:
    return call.app[ENGINE].flow_list()


@routes.put(
    "/flows/{name}",
    summary="Create or replace a flow (201 when new)",
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
    transient = call.request.query.get("transient", "false")
    if transient not in ("true", "false"):
        raise InvalidInput("transient", "must be true or false")
    flow, created = await call.app[ENGINE].put_flow(
        path_name(call.request), call.body, transient=transient == "true"
    )
    return Answered(flow, 201) if created else flow


@routes.get("/flows/{name}", summary="One flow", auth="user", answer=FlowBody, errors=(404, 422))
async def _get(call: Call[None]) -> FlowBody:
    return call.app[ENGINE].flow(path_name(call.request))


@routes.delete(
    "/flows/{name}", summary="Delete a flow", auth="user", answer=Deleted, errors=(404, 422)
)
async def _delete(call: Call[None]) -> Deleted:
    return call.app[ENGINE].delete_flow(path_name(call.request))


@routes.post(
    "/flows/{name}/runs",
    summary="Start a run of a flow",
    auth="user",
    answer=RunBody,
    status=201,
    body=RunRequest,
    body_optional=True,
    errors=(404, 422),
)
async def _start_run(call: Call[RunRequest]) -> RunBody:
    return await call.app[ENGINE].start_run(path_name(call.request), call.body.params)
