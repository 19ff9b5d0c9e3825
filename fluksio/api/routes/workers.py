"""Workers: attach, what is attached, what it has, and the runner a host may copy.

``GET /workers/attach``      the WebSocket (see ``fluksio.api.attach``)
``GET /workers``             attached workers and those refused for their protocol
``GET /workers/resources``   every place's inventory and what is free, the queue, provisioning
``GET /workers/runtime``     the runner module, for a host that cannot pip install
``GET /workers/agent.py``    the agent in one file, to run beside the runner

``/workers`` and ``/workers/resources`` carry an ``ETag`` and answer ``If-None-Match`` with
``304`` while nothing changed, without building the view: an open Workers screen stays
cheap however many workers are attached.

The answers are built by the engine (:mod:`fluksio.engine.views`) as the wire's models.
"""

from __future__ import annotations

from aiohttp import web

from fluksio.agent.onefile import runner_source
from fluksio.agent.standalone import build_standalone_agent
from fluksio.api.appkeys import ENGINE
from fluksio.api.attach import attach
from fluksio.api.declare import Call, Param, Routes, View
from fluksio.wire.answers.workers import ResourcesBody, WorkerList

__all__ = ["routes"]

routes = Routes()


@routes.get(
    "/workers/attach",
    auth="worker",
    token_in_query=True,
    status=101,
    errors=(403,),
    media="none",
    params=(Param("token", "The worker token, for the published agent, which sends it so."),),
)
async def _attach(call: Call[None]) -> web.StreamResponse:
    """The attach WebSocket a worker dials (docs: protocol.md)"""
    return await attach(call.request, call.worker)


@routes.get("/workers", auth="user", answer=WorkerList, view=True)
async def _list(call: Call[None]) -> View:
    """Attached workers, and those refused for their protocol"""
    views = call.app[ENGINE].views
    # A heartbeat is no change: under one tag, only the answering workers' last_seen moves
    # (a worker that stops answering changes its status, and so the tag).
    # The registry counts every change a worker's body shows (the stream's WorkerChanged,
    # its place's amounts and standing included): one counter.
    return View(views.worker_list, f"w{views.workers_version}")


@routes.get("/workers/resources", auth="user", answer=ResourcesBody, view=True)
async def _resources(call: Call[None]) -> View:
    """Every place's amounts, the queue with why each call waits, provisioning"""
    views = call.app[ENGINE].views
    return View(views.resources, views.resources_version())


@routes.get("/workers/runtime", auth="none", media="text/x-python")
async def _runtime(_call: Call[None]) -> web.Response:
    """The runner module the agent runs each call with"""
    return web.Response(text=runner_source(), content_type="text/x-python")


@routes.get("/workers/agent.py", auth="none", media="text/x-python")
async def _standalone_agent(_call: Call[None]) -> web.Response:
    """The agent in one file, for a host that cannot pip install"""
    return web.Response(text=build_standalone_agent(), content_type="text/x-python")
