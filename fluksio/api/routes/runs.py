"""Runs: ``GET /runs/{id}`` (``?wait=S`` waits for the end), ``GET /runs``, cancel."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import RUN_MANAGER, RUNS
from fluksio.api.auth import require_superuser
from fluksio.api.errors import InvalidInput, NotFound
from fluksio.api.timefmt import iso8601

__all__ = ["routes"]

RUN_STATES = ("queued", "running", "succeeded", "failed", "cancelled")
MAX_WAIT_S = 60.0


def _number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(name, f"must be a number from {low:g} to {high:g}") from None
    if not low <= value <= high:
        raise InvalidInput(name, f"must be a number from {low:g} to {high:g}")
    return value


async def _get(request: web.Request) -> web.Response:
    require_superuser(request)
    run_id = request.match_info["run_id"]
    wait = _number(request, "wait", 0.0, 0.0, MAX_WAIT_S)
    described = await request.app[RUN_MANAGER].wait(run_id, wait)
    if described is None:
        raise NotFound(f"no run with id {run_id!r}")
    return web.json_response(described)


async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    state = request.query.get("state")
    if state is not None and state not in RUN_STATES:
        raise InvalidInput("state", f"must be one of {', '.join(RUN_STATES)}")
    limit = int(_number(request, "limit", 100, 1, 1000))
    rows = request.app[RUNS].find(flow=request.query.get("flow"), state=state, limit=limit)
    return web.json_response(
        [
            {
                "id": r.id,
                "flow": r.flow,
                "state": r.state,
                "created_at": iso8601(r.created_at),
                "started_at": iso8601(r.started_at),
                "ended_at": iso8601(r.ended_at),
            }
            for r in rows
        ]
    )


async def _cancel(request: web.Request) -> web.Response:
    require_superuser(request)
    return web.json_response(request.app[RUN_MANAGER].cancel(request.match_info["run_id"]))


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/runs", _list),
        web.get(f"{prefix}/runs/{{run_id}}", _get),
        web.post(f"{prefix}/runs/{{run_id}}/cancel", _cancel),
    ]
