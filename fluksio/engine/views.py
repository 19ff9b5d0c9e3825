"""What the routes and the live feed read of the engine: frozen views, made here only.

A worker with its place, the places' amounts, the waiting calls, each provisioner's
profiles with their jobs: plain data, times in seconds since the epoch. The HTTP layer
turns them into its answers and imports no scheduler or provisioner type, so a change
of how the core holds something stops here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fluksio.engine.dispatch import Dispatcher
from fluksio.engine.runs.views import WaitingCall
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.engine.workers.registry import WorkerRegistry
from fluksio.engine.workers.session import WorkerSession
from fluksio.provisioners.requests import MachineRequest, ProfileStatus, RequestStage
from fluksio.scheduler import ENGINE_ID, PlaceView

__all__ = [
    "Amounts",
    "BroughtInfo",
    "EngineViews",
    "JobInfo",
    "PlaceInfo",
    "ProfileInfo",
    "WorkerInfo",
]

Amounts = dict[str, int | None]
"""``slots``, ``cpus``, ``gpus``, ``ram_mb``; None where a worker did not say."""


@dataclass(frozen=True)
class PlaceInfo:
    """A place (the engine or a worker): what it has and what is free of it now."""

    id: str
    name: str
    labels: tuple[str, ...]
    inventory: Amounts
    free: Amounts
    calls: int
    """The calls placed here and not yet ended."""
    answering: bool
    cached: int = 0
    """How many artifacts its cache reported holding."""

    @property
    def status(self) -> Literal["busy", "idle", "not answering"]:
        if not self.answering:
            return "not answering"
        return "busy" if self.calls else "idle"


def _place(view: PlaceView) -> PlaceInfo:
    return PlaceInfo(
        id=view.id,
        name=view.name,
        labels=tuple(sorted(view.labels)),
        inventory=view.inventory._asdict(),
        free=view.free._asdict(),
        calls=view.calls,
        answering=not view.paused,
        cached=view.cached,
    )


@dataclass(frozen=True)
class WorkerInfo:
    """An attached worker: its connection, and its place once the dispatcher has one."""

    session: WorkerSession
    place: PlaceInfo | None


@dataclass(frozen=True)
class JobInfo:
    """A machine request of a profile (a job, once submitted), as it stands."""

    request_id: str
    job_id: str | None
    stage: RequestStage
    state: str | None
    """The batch system's own word for it (``PENDING``), once polled."""
    reason: str | None
    since: float
    submitted_at: float
    answer_lost: str | None


def _job(request: MachineRequest) -> JobInfo:
    return JobInfo(
        request_id=request.id,
        job_id=request.job_id,
        stage=request.stage,
        state=request.status.native if request.status else None,
        reason=request.status.reason if request.status else None,
        since=request.status_since or request.created_at,
        submitted_at=request.created_at,
        answer_lost=request.answer_lost,
    )


@dataclass(frozen=True)
class BroughtInfo:
    """A worker a profile's job brought, while it is attached."""

    worker_id: str
    name: str
    job_id: str | None
    attached_at: float


@dataclass(frozen=True)
class ProfileInfo:
    """One profile of one provisioner: what it offers and how its jobs stand."""

    provisioner: str
    type_name: str
    name: str
    labels: tuple[str, ...]
    cpus: int | None
    gpus: int | None
    ram_mb: int | None
    max_workers: int
    parallel: int
    outstanding: JobInfo | None
    jobs: tuple[JobInfo, ...]
    last_error: tuple[float, str] | None
    retry_at: float | None
    failures: int
    login_needed: str | None
    path_down: str | None
    workers: tuple[BroughtInfo, ...]


def _profile(status: ProfileStatus) -> ProfileInfo:
    profile = status.profile
    return ProfileInfo(
        provisioner=status.provisioner,
        type_name=status.type_name,
        name=profile.name,
        labels=tuple(profile.labels),
        cpus=profile.cpus,
        gpus=profile.gpus,
        ram_mb=profile.ram_mb,
        max_workers=profile.max_workers,
        parallel=profile.worker_parallel,
        outstanding=_job(status.outstanding) if status.outstanding else None,
        jobs=tuple(_job(job) for job in status.jobs),
        last_error=status.last_error,
        retry_at=status.retry_at,
        failures=status.failures,
        login_needed=status.login_needed,
        path_down=status.path_down,
        workers=tuple(
            BroughtInfo(w.worker_id, w.name, w.job_id, w.attached_at) for w in status.workers
        ),
    )


class EngineViews:
    """The read-only questions the HTTP layer asks, each answered with frozen views."""

    def __init__(self, registry: WorkerRegistry, dispatcher: Dispatcher) -> None:
        self._registry = registry
        self._dispatcher = dispatcher

    @property
    def workers_version(self) -> int:
        """Moves whenever anything a worker's view shows changes (not its heartbeats)."""
        return self._registry.version

    @property
    def resources_version(self) -> int:
        """Moves whenever the places, the queue or provisioning change."""
        return self._dispatcher.version

    def worker(self, worker_id: str) -> WorkerInfo | None:
        """The attached worker with its place; None once gone or before it has a place."""
        session = self._registry.get(worker_id)
        view = self._dispatcher.place(worker_id)
        if session is None or view is None:
            return None
        return WorkerInfo(session, _place(view))

    def is_attached(self, worker_id: str) -> bool:
        return self._registry.get(worker_id) is not None

    def workers(self) -> list[WorkerInfo]:
        """Every attached worker, in the order they attached."""
        return [self._with_place(session) for session in self._registry.sessions()]

    def _with_place(self, session: WorkerSession) -> WorkerInfo:
        view = self._dispatcher.place(session.id)
        return WorkerInfo(session, _place(view) if view is not None else None)

    def refused(self) -> list[NeedsUpgrade]:
        """Workers refused for their protocol, newest last."""
        return self._registry.needs_upgrade()

    def engine_place(self) -> PlaceInfo:
        view = self._dispatcher.place(ENGINE_ID)
        assert view is not None  # the engine's place exists from the dispatcher's start
        return _place(view)

    def has_waiting(self) -> bool:
        return self._dispatcher.has_waiting()

    def waiting(self) -> list[WaitingCall]:
        """Every waiting call, in the order it will be served, with why it waits."""
        return self._dispatcher.waiting_calls()

    def profiles(self) -> list[ProfileInfo]:
        """Every configured profile, provisioner by provisioner."""
        return [_profile(status) for status in self._dispatcher.profiles()]
