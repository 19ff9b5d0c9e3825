"""Workers: attach, what is attached, what it has, and the runner a host may copy.

``GET /workers/attach``      the WebSocket (see ``fluksio.api.workers.attach``)
``GET /workers``             attached workers and those refused for their protocol
``GET /workers/resources``   every place's inventory and what is free, and the queue
``GET /workers/runtime``     the runner module, for a host that cannot pip install
``GET /workers/agent.py``    the agent in one file, to run beside the runner
"""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from fluksio.agent import runner
from fluksio.agent.standalone import build_standalone_agent
from fluksio.api.appkeys import PROVISIONING, RUN_MANAGER, WORKERS
from fluksio.api.auth import require_superuser
from fluksio.api.timefmt import iso8601
from fluksio.api.workers.attach import attach
from fluksio.api.workers.session import WorkerSession
from fluksio.scheduler import ENGINE_ID, Scheduler
from fluksio.scheduler.resources import UNKNOWN

__all__ = ["routes"]


def _amounts(vector: tuple[int, int, int, int]) -> dict[str, int | None]:
    def known(value: int) -> int | None:
        return None if value == UNKNOWN else value

    return {
        "gpus": known(vector[0]),
        "cpus": known(vector[1]),
        "ram_mb": known(vector[2]),
        "slots": vector[3],
    }


def _place(scheduler: Scheduler, place_id: str) -> dict[str, Any]:
    place = scheduler.place(place_id)
    return {"inventory": _amounts(place.capacity), "free": _amounts(place.free())}


def _session_view(session: WorkerSession, scheduler: Scheduler) -> dict[str, Any]:
    hello = session.hello
    view: dict[str, Any] = {
        "id": session.id,
        "name": session.name,
        "labels": sorted(hello.labels),
        "parallel": hello.max_parallel,
        "in_flight": session.in_flight,
        "status": "busy" if session.in_flight else "idle",
        "attached_at": iso8601(session.attached_at),
        "last_seen": iso8601(session.last_seen),
        "python": hello.python,
        "venv_digest": hello.venv_digest,
        "version": hello.version or "0.1.x",
        "protocol": hello.protocol,
        "slurm_job_id": hello.slurm_job_id,
        "token": {"jti": session.token.jti, "name": session.token.name},
    }
    if scheduler.has_place(session.id):
        view.update(_place(scheduler, session.id))
    return view


async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    scheduler = request.app[RUN_MANAGER].scheduler
    registry = request.app[WORKERS]
    attached = [_session_view(s, scheduler) for s in registry.sessions()]
    refused = [
        {
            "name": e.name,
            "status": "needs upgrade",
            "protocol": e.protocol,
            "version": e.version,
            "python": e.python,
            "refused_at": iso8601(e.refused_at),
            "reason": e.reason,
        }
        for e in registry.needs_upgrade()
    ]
    return web.json_response(attached + refused)


async def _resources(request: web.Request) -> web.Response:
    require_superuser(request)
    manager = request.app[RUN_MANAGER]
    scheduler = manager.scheduler
    workers = [
        {"id": s.id, "name": s.name, "labels": sorted(s.hello.labels), **_place(scheduler, s.id)}
        for s in request.app[WORKERS].sessions()
        if scheduler.has_place(s.id)
    ]
    engine = {"id": ENGINE_ID, "name": "engine", **_place(scheduler, ENGINE_ID)}
    provisioning = request.app.get(PROVISIONING)
    return web.json_response(
        {
            "places": [engine, *workers],
            "labels": _by_label(workers),
            "queued": manager.queued_view(),
            "provisioners": _timestamps(provisioning.view()) if provisioning else [],
        }
    )


def _by_label(workers: list[dict[str, Any]]) -> dict[str, Any]:
    """Attached capacity per label: workers, and the inventory and free amounts summed."""
    totals: dict[str, dict[str, Any]] = {}
    for place in workers:
        for label in place["labels"]:
            entry = totals.setdefault(label, {"workers": 0, "inventory": {}, "free": {}})
            entry["workers"] += 1
            for part in ("inventory", "free"):
                for resource, amount in place[part].items():
                    if amount is not None:
                        entry[part][resource] = entry[part].get(resource, 0) + amount
    return totals


_TIME_FIELDS = frozenset({"at", "since", "submitted_at", "attached_at", "retry_at"})


def _timestamps(value: Any) -> Any:
    """The driver's epoch seconds as the API's ISO 8601 times, wherever they are nested."""
    if isinstance(value, list):
        return [_timestamps(item) for item in value]
    if isinstance(value, dict):
        return {
            key: iso8601(item) if key in _TIME_FIELDS else _timestamps(item)
            for key, item in value.items()
        }
    return value


async def _standalone_agent(_request: web.Request) -> web.Response:
    return web.Response(text=build_standalone_agent(), content_type="text/x-python")


@functools.cache
def _runner_source() -> str:
    with open(runner.__file__, encoding="utf-8") as handle:
        return handle.read()


async def _runtime(_request: web.Request) -> web.Response:
    return web.Response(text=_runner_source(), content_type="text/x-python")


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.get(f"{prefix}/workers/attach", attach),
        web.get(f"{prefix}/workers", _list),
        web.get(f"{prefix}/workers/resources", _resources),
        web.get(f"{prefix}/workers/runtime", _runtime),
        web.get(f"{prefix}/workers/agent.py", _standalone_agent),
    ]
