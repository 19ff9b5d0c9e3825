"""Workers: attach, what is attached, what it has, and the runner a host may copy.

``GET /workers/attach``      the WebSocket (see ``fluksio.api.attach``)
``GET /workers``             attached workers and those refused for their protocol
``GET /workers/resources``   every place's inventory and what is free, the queue, provisioning
``GET /workers/runtime``     the runner module, for a host that cannot pip install
``GET /workers/agent.py``    the agent in one file, to run beside the runner

``/workers`` and ``/workers/resources`` carry an ``ETag`` and answer ``If-None-Match`` with
``304`` while nothing changed, without building the view: an open Workers screen stays
cheap however many workers are attached.

The shapes of these answers are declared here, once, as pydantic models.
"""

from __future__ import annotations

from collections import Counter
from typing import cast

from aiohttp import web

from fluksio.agent.onefile import runner_source
from fluksio.agent.standalone import build_standalone_agent
from fluksio.api.appkeys import ENGINE
from fluksio.api.attach import attach
from fluksio.api.declare import Call, Param, Routes, View
from fluksio.api.timefmt import utc
from fluksio.engine.runs.views import WaitingCall
from fluksio.engine.views import Amounts, EngineViews, JobInfo, PlaceInfo, ProfileInfo, WorkerInfo
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.wire.answers.workers import (
    AmountsBody,
    BroughtWorkerBody,
    ErrorAt,
    LabelCapacity,
    MachineRequestBody,
    PlaceBody,
    ProfileBody,
    ProvisionerBody,
    RefusedWorkerBody,
    ResourcesBody,
    Stage,
    TokenRef,
    WaitingBody,
    WaitKind,
    WorkerBody,
    WorkerList,
)

__all__ = [
    "provisioner_bodies",
    "refused_body",
    "routes",
    "waiting_bodies",
    "worker_body",
]

routes = Routes()


def _amounts(amounts: Amounts) -> AmountsBody:
    return AmountsBody.model_validate(amounts)


def _place(place: PlaceInfo) -> PlaceBody:
    return PlaceBody(
        id=place.id,
        name=place.name,
        labels=list(place.labels),
        inventory=_amounts(place.inventory),
        free=_amounts(place.free),
    )


def worker_body(worker: WorkerInfo) -> WorkerBody:
    session, place = worker.session, worker.place
    hello = session.hello
    return WorkerBody(
        id=session.id,
        name=session.name,
        labels=sorted(hello.labels),
        parallel=hello.max_parallel,
        pipeline=session.pipeline,
        cached_artifacts=place.cached if place is not None else 0,
        in_flight=place.calls if place is not None else 0,
        sent_ahead=session.machine.sent_ahead(),
        status=place.status if place is not None else "idle",
        attached_at=utc(session.machine.attached_at),
        last_seen=utc(session.machine.last_seen),
        python=hello.python,
        python_version=hello.python_version,
        venv_digest=hello.venv_digest,
        version=hello.version or "0.1.x",
        protocol=hello.protocol,
        slurm_job_id=hello.slurm_job_id,
        batch_job=session.batch_job,
        host=hello.host,
        ends_at=utc(hello.ends_at),
        token=TokenRef(jti=session.token.jti, name=session.token.name),
        inventory=_amounts(place.inventory) if place is not None else None,
        free=_amounts(place.free) if place is not None else None,
    )


def refused_body(entry: NeedsUpgrade) -> RefusedWorkerBody:
    return RefusedWorkerBody(
        name=entry.name,
        protocol=entry.protocol,
        version=entry.version,
        python=entry.python,
        refused_at=utc(entry.refused_at),
        reason=entry.reason,
    )


@routes.get(
    "/workers/attach",
    summary="The attach WebSocket a worker dials (docs: protocol.md)",
    auth="worker",
    token_in_query=True,
    status=101,
    errors=(403,),
    media="none",
    params=(Param("token", "The worker token, for the published agent, which sends it so."),),
)
async def _attach(call: Call[None]) -> web.StreamResponse:
    return await attach(call.request, call.worker)


@routes.get(
    "/workers",
    summary="Attached workers, and those refused for their protocol",
    auth="user",
    answer=WorkerList,
    view=True,
)
async def _list(call: Call[None]) -> View:
    views = call.app[ENGINE].views

    def render() -> WorkerList:
        attached = [worker_body(worker) for worker in views.workers()]
        refused = [refused_body(e) for e in views.refused()]
        return WorkerList([*attached, *refused])

    # A heartbeat is no change: under one tag, only the answering workers' last_seen moves
    # (a worker that stops answering changes its status, and so the tag).
    # The registry counts every change a worker's body shows (the stream's WorkerChanged,
    # its place's amounts and standing included): one counter.
    return View(render, f"w{views.workers_version}")


@routes.get(
    "/workers/resources",
    summary="Every place's amounts, the queue with why each call waits, provisioning",
    auth="user",
    answer=ResourcesBody,
    view=True,
)
async def _resources(call: Call[None]) -> View:
    engine = call.app[ENGINE]
    version = f"r{engine.views.resources_version}"  # places, queue, provisioning: one counter
    if engine.views.has_waiting():
        # Waiting calls' reasons count down ("trying again in 30 s"): new each second.
        version += f".{int(engine.clock.now())}"
    return View(lambda: _resources_body(engine.views), version)


def _resources_body(views: EngineViews) -> ResourcesBody:
    workers = [_place(w.place) for w in views.workers() if w.place is not None]
    return ResourcesBody(
        places=[_place(views.engine_place()), *workers],
        labels=_by_label(workers),
        queued=waiting_bodies(views.waiting()),
        provisioners=provisioner_bodies(views.profiles()),
    )


def waiting_bodies(waiting: list[WaitingCall]) -> list[WaitingBody]:
    """Every waiting call, in the order it will be served, with why it waits."""
    return [
        WaitingBody(
            call_id=call.call_id,
            run_id=call.run_id,
            flow=call.flow,
            node=call.node,
            worker=call.worker,
            queued_at=utc(call.queued_at),
            reason=_reason(call),
            kind=WaitKind(call.reason.kind) if call.reason is not None else None,
            items=call.items,
        )
        for call in waiting
    ]


def _reason(call: WaitingCall) -> str | None:
    """Why it waits; for an array, how many of its items wait so: ``9,812 items of sweep
    wait: ...``."""
    if call.reason is None:
        return None
    if call.items is None:
        return call.reason.text
    return f"{call.items:,} items of {call.node} wait: {call.reason.text}"


def _by_label(workers: list[PlaceBody]) -> dict[str, LabelCapacity]:
    totals: dict[str, LabelCapacity] = {}
    for place in workers:
        for label in place.labels:
            entry = totals.setdefault(label, LabelCapacity())
            entry.workers += 1
            for summed, amounts in ((entry.inventory, place.inventory), (entry.free, place.free)):
                for resource, amount in amounts.model_dump().items():
                    if amount is not None:
                        summed[resource] = summed.get(resource, 0) + amount
    return totals


def _stage(stage: str) -> Stage:
    # The engine's stages are the answer's, word for word (tests/test_openapi.py holds
    # the two lists together).
    return cast(Stage, stage)


def _job(job: JobInfo) -> MachineRequestBody:
    return MachineRequestBody(
        request_id=job.request_id,
        job_id=job.job_id,
        stage=_stage(job.stage),
        state=job.state,
        reason=job.reason,
        since=utc(job.since),
        submitted_at=utc(job.submitted_at),
        answer_lost=job.answer_lost,
    )


def provisioner_bodies(profiles: list[ProfileInfo]) -> list[ProvisionerBody]:
    by_name: dict[str, ProvisionerBody] = {}
    for profile in profiles:
        block = by_name.setdefault(
            profile.provisioner,
            ProvisionerBody(name=profile.provisioner, type=profile.type_name, profiles=[]),
        )
        block.profiles.append(
            ProfileBody(
                name=profile.name,
                labels=list(profile.labels),
                cpus=profile.cpus,
                gpus=profile.gpus,
                ram_mb=profile.ram_mb,
                max_workers=profile.max_workers,
                parallel=profile.parallel,
                outstanding=_job(profile.outstanding) if profile.outstanding else None,
                jobs=[_job(job) for job in profile.jobs],
                jobs_by_stage=dict(Counter(_stage(job.stage) for job in profile.jobs)),
                last_error=ErrorAt(at=utc(profile.last_error[0]), message=profile.last_error[1])
                if profile.last_error
                else None,
                retry_at=utc(profile.retry_at),
                failures=profile.failures,
                login_needed=profile.login_needed,
                path_down=profile.path_down,
                workers=[
                    BroughtWorkerBody(
                        id=w.worker_id, name=w.name, job_id=w.job_id, attached_at=utc(w.attached_at)
                    )
                    for w in profile.workers
                ],
            )
        )
    return list(by_name.values())


@routes.get(
    "/workers/runtime",
    summary="The runner module the agent runs each call with",
    auth="none",
    media="text/x-python",
)
async def _runtime(_call: Call[None]) -> web.Response:
    return web.Response(text=runner_source(), content_type="text/x-python")


@routes.get(
    "/workers/agent.py",
    summary="The agent in one file, for a host that cannot pip install",
    auth="none",
    media="text/x-python",
)
async def _standalone_agent(_call: Call[None]) -> web.Response:
    return web.Response(text=build_standalone_agent(), content_type="text/x-python")
