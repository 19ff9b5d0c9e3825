"""Flows: ``PUT/GET/DELETE /flows/{name}``, ``GET /flows``, ``POST /flows/{name}/runs``."""

from __future__ import annotations

import asyncio

from fluksio.api.appkeys import ENGINE
from fluksio.api.bodies import path_name
from fluksio.api.declare import Answered, Call, Param, Routes
from fluksio.api.routes.runs import RunBody, run_body
from fluksio.engine.answers import flow_body
from fluksio.engine.errors import InvalidInput, NotFound
from fluksio.engine.runs.items import ItemSource
from fluksio.engine.runs.validation import check_flow, flow_warnings
from fluksio.wire.answers.flows import FlowBody, FlowSummary
from fluksio.wire.answers.resources import Deleted
from fluksio.wire.flows import FlowSpec, RunRequest
from fluksio.wire.times import utc

__all__ = ["routes"]

routes = Routes()


@routes.get("/flows", summary="Every flow", auth="user", answer=FlowSummary, many=True)
async def _list(call: Call[None]) -> list[FlowSummary]:
    return [
        FlowSummary(name=r.name, nodes=len(r.spec["nodes"]), updated_at=utc(r.updated_at))
        for r in call.app[ENGINE].flows.all()
    ]


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
    name = path_name(call.request)
    transient = call.request.query.get("transient", "false")
    if transient not in ("true", "false"):
        raise InvalidInput("transient", "must be true or false")
    await asyncio.get_running_loop().run_in_executor(None, check_flow, call.body)
    await _count_items(call.app[ENGINE].dispatcher.items.source, call.body)
    flows = call.app[ENGINE].flows
    created = flows.put(name, call.body.model_dump(mode="json"), transient=transient == "true")
    record = flows.get(name)
    assert record is not None
    provisioning = call.app[ENGINE].dispatcher.provisioning
    profiles = provisioning.scheduler_profiles() if provisioning is not None else []
    margin = call.app[ENGINE].settings.walltime_margin_s
    view = flow_body(record).model_copy(
        update={"warnings": flow_warnings(call.body, profiles, margin)}
    )
    return Answered(view, 201) if created else view


@routes.get("/flows/{name}", summary="One flow", auth="user", answer=FlowBody, errors=(404, 422))
async def _get(call: Call[None]) -> FlowBody:
    name = path_name(call.request)
    record = call.app[ENGINE].flows.get(name)
    if record is None:
        raise NotFound(f"no flow named {name!r}")
    return flow_body(record)


@routes.delete(
    "/flows/{name}", summary="Delete a flow", auth="user", answer=Deleted, errors=(404, 422)
)
async def _delete(call: Call[None]) -> Deleted:
    name = path_name(call.request)
    if not call.app[ENGINE].flows.delete(name):
        raise NotFound(f"no flow named {name!r}")
    return Deleted(deleted=name)


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
    name = path_name(call.request)
    engine = call.app[ENGINE]
    record = engine.flows.get(name)
    if record is None:
        raise NotFound(f"no flow named {name!r}")
    items = await _count_items(engine.dispatcher.items.source, FlowSpec.model_validate(record.spec))
    return run_body(engine.dispatcher.start_run(name, call.body.params, items))


async def _count_items(source: ItemSource, flow: FlowSpec) -> dict[str, int]:
    """How many items each array node has, every line of its artifacts checked (off the
    event loop: a million lines take a second)."""
    arrays = [(index, node) for index, node in enumerate(flow.nodes) if node.is_array]
    if not arrays:
        return {}

    def count() -> dict[str, int]:
        return {node.id: source.count(node, index) for index, node in arrays}

    return await asyncio.get_running_loop().run_in_executor(None, count)
