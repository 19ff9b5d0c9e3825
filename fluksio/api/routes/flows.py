"""Flows: ``PUT/GET/DELETE /flows/{name}``, ``GET /flows``, ``POST /flows/{name}/runs``."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import FLOWS, RUN_MANAGER
from fluksio.api.auth import require_superuser
from fluksio.api.bodies import path_name, read_json
from fluksio.api.errors import NotFound
from fluksio.api.responses import model_response
from fluksio.api.routes.runs import run_body
from fluksio.api.runs.models import FlowSpec, RunRequest
from fluksio.api.runs.store import FlowRecord
from fluksio.api.runs.validation import check_flow
from fluksio.api.timefmt import iso8601

__all__ = ["routes"]


def _view(record: FlowRecord) -> dict[str, object]:
    return {
        "name": record.name,
        "nodes": record.spec["nodes"],
        "created_at": iso8601(record.created_at),
        "updated_at": iso8601(record.updated_at),
    }


async def _put(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    flow = await read_json(request, FlowSpec)
    check_flow(flow)
    flows = request.app[FLOWS]
    created = flows.put(name, flow.model_dump(mode="json"))
    record = flows.get(name)
    assert record is not None
    return web.json_response(_view(record), status=201 if created else 200)


async def _get(request: web.Request) -> web.Response:
    require_superuser(request)
    record = request.app[FLOWS].get(path_name(request))
    if record is None:
        raise NotFound(f"no flow named {request.match_info['name']!r}")
    return web.json_response(_view(record))


async def _delete(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    if not request.app[FLOWS].delete(name):
        raise NotFound(f"no flow named {name!r}")
    return web.json_response({"deleted": name})


async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    return web.json_response(
        [
            {"name": r.name, "nodes": len(r.spec["nodes"]), "updated_at": iso8601(r.updated_at)}
            for r in request.app[FLOWS].all()
        ]
    )


async def _start_run(request: web.Request) -> web.Response:
    require_superuser(request)
    name = path_name(request)
    body = await read_json(request, RunRequest) if request.can_read_body else RunRequest()
    run = request.app[RUN_MANAGER].start_run(name, body.params)
    return model_response(run_body(run), status=201)


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/flows", _list),
        web.put(f"{prefix}/flows/{{name}}", _put),
        web.get(f"{prefix}/flows/{{name}}", _get),
        web.delete(f"{prefix}/flows/{{name}}", _delete),
        web.post(f"{prefix}/flows/{{name}}/runs", _start_run),
    ]
