"""Runs: ``GET /runs/{id}`` (``?wait=S`` waits for the end), ``GET /runs``, cancel.

The engine builds the answers (:mod:`fluksio.engine.runs.answers`), as the wire's models.
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Param, Routes
from fluksio.errors import InvalidInput
from fluksio.wire.answers.resources import Deleted
from fluksio.wire.answers.runs import RunBody, RunSummary
from fluksio.wire.states import RunState

__all__ = ["MAX_WAIT_S", "RunBody", "number", "routes", "wait_param"]

MAX_WAIT_S = 60.0
routes = Routes()


def number(request: web.Request, name: str, default: float, low: float, high: float) -> float:
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


def wait_param(until: str) -> Param:
    """``?wait=S``: hold the answer up to S seconds (at most 60) ``until`` ..."""
    return Param(
        "wait",
        f"Hold the answer up to this many seconds (at most {MAX_WAIT_S:g}) {until}",
        schema={"type": "number", "minimum": 0, "maximum": MAX_WAIT_S},
    )


def _since(text: str | None) -> float | None:
    """``since`` as a timestamp: an ISO 8601 time that says its zone."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidInput(
            "since", "must be an ISO 8601 time with its zone, like 2026-12-04T09:00Z"
        )
    return moment.timestamp()


@routes.get(
    "/runs",
    auth="user",
    answer=RunSummary,
    many=True,
    errors=(422,),
    params=(
        Param("flow", "Only runs of this flow."),
        Param("state", "Only runs in this state.", schema={"enum": [s.value for s in RunState]}),
        Param(
            "since",
            "Only runs created at this time or after (ISO 8601, with its zone).",
            schema={"type": "string", "format": "date-time"},
        ),
        Param(
            "limit",
            "At most this many (1 to 1000, default 100).",
            schema={"type": "integer", "minimum": 1, "maximum": 1000},
        ),
    ),
)
async def _list(call: Call[None]) -> list[RunSummary]:
    """Recent runs, newest first"""
    query = call.request.query
    raw_state = query.get("state")
    try:
        state = RunState(raw_state) if raw_state is not None else None
    except ValueError:
        raise InvalidInput("state", f"must be one of {', '.join(RunState)}") from None
    limit = int(number(call.request, "limit", 100, 1, 1000))
    since = _since(query.get("since"))
    return call.app[ENGINE].run_list(flow=query.get("flow"), state=state, limit=limit, since=since)


@routes.get(
    "/runs/{run_id}",
    auth="user",
    answer=RunBody,
    errors=(404, 422),
    params=(wait_param("until the run ends."),),
)
async def _get(call: Call[None]) -> RunBody:
    """One run with its nodes"""
    wait = number(call.request, "wait", 0.0, 0.0, MAX_WAIT_S)
    return await call.app[ENGINE].run(call.request.match_info["run_id"], wait)


@routes.post(
    "/runs/{run_id}/cancel",
    auth="user",
    answer=RunBody,
    errors=(404, 409, 422),
    params=(
        wait_param(
            "until the run has ended cancelled. Without it the answer is the run at the"
            " moment of the request: its waiting nodes already cancelled, its running ones"
            " still running while their processes are stopped (moments on the engine, a"
            " round trip on a worker)."
        ),
    ),
)
async def _cancel(call: Call[None]) -> RunBody:
    """Cancel a run: what it executes is killed (see wait)"""
    wait = number(call.request, "wait", 0.0, 0.0, MAX_WAIT_S)
    return await call.app[ENGINE].cancel_run(call.request.match_info["run_id"], wait)


@routes.post("/runs/{run_id}/retry", auth="user", answer=RunBody, errors=(404, 409))
async def _retry(call: Call[None]) -> RunBody:
    """Run a failed run's failed nodes and array items again, in it"""
    return call.app[ENGINE].retry_run(call.request.match_info["run_id"])


@routes.delete("/runs/{run_id}", auth="user", answer=Deleted, errors=(404, 409))
async def _delete(call: Call[None]) -> Deleted:
    """Delete an ended run (409 while it has not ended)"""
    return call.app[ENGINE].delete_run(call.request.match_info["run_id"])
