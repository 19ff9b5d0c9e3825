"""What the routes and the live feed read of the engine: its answers, built here only.

A worker with its place, the places' amounts, the waiting calls with why each waits, each
provisioner's profiles with their jobs: each built straight into the wire's answer model
(:mod:`fluksio.wire.answers`) from the registry and the dispatcher. The HTTP layer
imports no scheduler or provisioner type and copies nothing field by field, so a change
of how the core holds something stops here.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from fluksio.clock import Clock
from fluksio.engine.dispatch.dispatcher import Dispatcher
from fluksio.engine.runs.views import WaitingCall
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.engine.workers.registry import WorkerRegistry
from fluksio.engine.workers.session import WorkerSession
from fluksio.provisioners.machine.requests import MachineRequest, ProfileStatus
from fluksio.scheduler import ENGINE_ID, PlaceView, Resources
from fluksio.wire.answers.workers import (
    AmountsBody,
    BroughtWorkerBody,
    ContainersBody,
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
from fluksio.wire.times import utc

__all__ = ["EngineViews", "refused_body"]


class EngineViews:
    """The read-only questions the HTTP layer asks, each answered with its answer model."""

    def __init__(self, registry: WorkerRegistry, dispatcher: Dispatcher, clock: Clock) -> None:
        self._registry = registry
        self._dispatcher = dispatcher
        self._clock = clock

    def unwritten_runs(self) -> int:
        """Runs whose changes wait in memory because the store cannot be written now."""
        return self._dispatcher.unwritten_runs()

    @property
    def workers_version(self) -> int:
        """Moves whenever anything a worker's answer shows changes (not its heartbeats)."""
        return self._registry.version

    def resources_version(self) -> str:
        """Moves whenever the places, the queue or provisioning change (one counter), and
        each second while calls wait: their reasons count down ("trying again in 30 s")."""
        version = f"r{self._dispatcher.version}"
        if self._dispatcher.has_waiting():
            version += f".{int(self._clock.now())}"
        return version

    def worker(self, worker_id: str) -> WorkerBody | None:
        """The attached worker with its place; None once gone or before it has a place."""
        session = self._registry.get(worker_id)
        view = self._dispatcher.place(worker_id)
        if session is None or view is None:
            return None
        return _worker(session, view)

    def is_attached(self, worker_id: str) -> bool:
        return self._registry.get(worker_id) is not None

    def worker_list(self) -> WorkerList:
        """``GET /workers``: every attached worker in the order they attached, then those
        refused for their protocol, newest last."""
        attached = [
            _worker(session, self._dispatcher.place(session.id))
            for session in self._registry.sessions()
        ]
        return WorkerList([*attached, *map(refused_body, self._registry.needs_upgrade())])

    def resources(self) -> ResourcesBody:
        """``GET /workers/resources``: every place, capacity by label, the queue, and
        provisioning."""
        engine = self._dispatcher.place(ENGINE_ID)
        assert engine is not None  # the engine's place exists from the dispatcher's start
        workers = [
            _place(view)
            for session in self._registry.sessions()
            if (view := self._dispatcher.place(session.id)) is not None
        ]
        return ResourcesBody(
            places=[_place(engine), *workers],
            labels=_by_label(workers),
            queued=self.waiting(),
            provisioners=self.provisioners(),
        )

    def has_waiting(self) -> bool:
        return self._dispatcher.has_waiting()

    def waiting(self) -> list[WaitingBody]:
        """Every waiting call, in the order it will be served, with why it waits."""
        return [_waiting(call) for call in self._dispatcher.waiting_calls()]

    def profile(self, provisioner: str, profile: str) -> ProfileBody:
        """One profile as :meth:`provisioners` shows it (it must be configured)."""
        (status,) = [
            status
            for status in self._dispatcher.profiles()
            if (status.provisioner, status.profile.name) == (provisioner, profile)
        ]
        return _profile(status)

    def provisioners(self) -> list[ProvisionerBody]:
        """Every configured provisioner with its profiles, in the order configured."""
        by_name: dict[str, ProvisionerBody] = {}
        for status in self._dispatcher.profiles():
            block = by_name.setdefault(
                status.provisioner,
                ProvisionerBody(name=status.provisioner, type=status.type_name, profiles=[]),
            )
            block.profiles.append(_profile(status))
        return list(by_name.values())


def refused_body(entry: NeedsUpgrade) -> RefusedWorkerBody:
    """A worker refused for its protocol, as ``GET /workers`` and the feed show it."""
    return RefusedWorkerBody(
        name=entry.name,
        protocol=entry.protocol,
        version=entry.version,
        python=entry.python,
        refused_at=utc(entry.refused_at),
        reason=entry.reason,
    )


def _amounts(amounts: Resources) -> AmountsBody:
    return AmountsBody.model_validate(amounts._asdict())


def _place(view: PlaceView) -> PlaceBody:
    return PlaceBody(
        id=view.id,
        name=view.name,
        labels=sorted(view.labels),
        inventory=_amounts(view.inventory),
        free=_amounts(view.free),
    )


def _worker(session: WorkerSession, place: PlaceView | None) -> WorkerBody:
    hello = session.hello
    status: Literal["busy", "idle", "not answering", "stopping"]
    if place is None:
        status = "idle"
    elif place.stopping:
        status = "stopping"
    elif place.paused:
        status = "not answering"
    else:
        status = "busy" if place.calls else "idle"
    return WorkerBody(
        id=session.id,
        name=session.name,
        labels=sorted(hello.labels),
        parallel=hello.max_parallel,
        pipeline=session.pipeline,
        cached_artifacts=place.cached if place is not None else 0,
        containers=None
        if hello.containers is None
        else ContainersBody(
            runtime=hello.containers.runtime,
            allow_images=hello.containers.images,
            held=session.held_images,
        ),
        in_flight=place.calls if place is not None else 0,
        sent_ahead=session.machine.sent_ahead(),
        status=status,
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


def _waiting(call: WaitingCall) -> WaitingBody:
    reason = call.reason
    said = None if reason is None else reason.text
    if said is not None and call.items is not None:
        # An array is listed once: how many of its items wait so.
        said = f"{call.items:,} items of {call.node} wait: {said}"
    return WaitingBody(
        call_id=call.call_id,
        run_id=call.run_id,
        flow=call.flow,
        node=call.node,
        worker=call.worker,
        queued_at=utc(call.queued_at),
        reason=said,
        kind=WaitKind(reason.kind) if reason is not None else None,
        items=call.items,
    )


def _stage(request: MachineRequest) -> Stage:
    # The machine's stages are the answer's, word for word (tests/test_openapi.py holds
    # the two lists together).
    return request.stage.value


def _job(request: MachineRequest) -> MachineRequestBody:
    status = request.status
    return MachineRequestBody(
        request_id=request.id,
        job_id=request.job_id,
        stage=_stage(request),
        state=status.native if status else None,
        reason=status.reason if status else None,
        since=utc(request.status_since or request.created_at),
        submitted_at=utc(request.created_at),
        answer_lost=request.answer_lost,
    )


def _profile(status: ProfileStatus) -> ProfileBody:
    profile = status.profile
    error = status.last_error
    return ProfileBody(
        name=profile.name,
        labels=list(profile.labels),
        cpus=profile.cpus,
        gpus=profile.gpus,
        ram_mb=profile.ram_mb,
        max_workers=profile.max_workers,
        parallel=profile.worker_parallel,
        outstanding=_job(status.outstanding) if status.outstanding else None,
        jobs=[_job(job) for job in status.jobs],
        jobs_by_stage=dict(Counter(_stage(job) for job in status.jobs)),
        last_error=ErrorAt(at=utc(error[0]), message=error[1]) if error else None,
        retry_at=utc(status.retry_at),
        failures=status.failures,
        login_needed=status.login_needed,
        path_down=status.path_down,
        paused=status.paused,
        site_limit=status.site_limit,
        workers=[
            BroughtWorkerBody(
                id=w.worker_id, name=w.name, job_id=w.job_id, attached_at=utc(w.attached_at)
            )
            for w in status.workers
        ],
    )
