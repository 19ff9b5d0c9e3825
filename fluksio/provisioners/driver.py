"""The engine's side of provisioning: one request per profile, polled, timed out, retried.

The scheduler says *which* profile a queued node needs (its plan's asks); this driver owns
everything that happens next, through the hooks of :mod:`.hookspecs`:

- at most one request per profile is outstanding, however often it is asked for;
- every live request of a provisioner is polled in one call per ``poll_interval_s``: a
  job that ends before its worker attached is a failure, noticed at that poll;
- a request whose worker has not attached within ``provision_timeout_s`` is cancelled on
  its own timer (0: never);
- a failure is kept as the profile's last error (with the outside system's words) and the
  profile rests for a capped, doubling backoff; then the engine's next scheduling pass
  asks again if the need is still there (never twice for one need);
- a worker attaching with a request's token fulfils it, clears the last error, and stays
  tied to it; the request's token is revoked when its job ends;
- at shutdown every request whose worker has not attached is cancelled.

What the engine provides (tokens, what to do on a change) comes in as :class:`EngineSide`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import pluggy
import structlog

from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobState,
    JobStatus,
    Profile,
    Provisioner,
    ProvisionError,
    Submission,
    WorkerEvent,
)
from fluksio.scheduler import Profile as SchedulerProfile

__all__ = ["EngineSide", "ProvisioningDriver", "Request"]

log = structlog.get_logger(__name__)
T = TypeVar("T")
# Cancelling at shutdown must not hold the engine up behind an unreachable login node.
SHUTDOWN_CANCEL_S = 20.0


class EngineSide(Protocol):
    """What the driver needs from the engine."""

    def mint_token(self, provisioner: str, profile: Profile, request_id: str) -> tuple[str, str]:
        """A worker token for one request (24 h, the profile's labels): (token, jti)."""

    def revoke_token(self, jti: str, reason: str) -> None: ...

    def remember(self, request: Request) -> None:
        """Keep a submitted request (and its stage) where a restarted engine finds it."""

    def forget(self, request_id: str) -> None: ...

    def changed(self) -> None:
        """Profiles' outstanding flags changed: give the scheduler the new ones, re-plan."""


@dataclass
class Request:
    """One machine asked for; ``stage`` is where it stands from the engine's side."""

    id: str
    provisioner: str
    profile: str
    created_at: float
    stage: str = "submitting"
    """``submitting``, ``queued`` (accepted, not running), ``started`` (running, its worker
    not attached yet), ``attached``, ``ended``."""
    job_id: str | None = None
    status: JobStatus | None = None
    status_since: float | None = None
    token_jti: str | None = None
    attached_at: float | None = None
    timer: asyncio.TimerHandle | None = None


@dataclass
class _Brought:
    """A worker a request of this profile brought, while it is attached."""

    name: str
    attached_at: float
    request: Request | None
    """None for a worker whose request an earlier engine run made and this one never saw."""
    reported_job_id: str | None
    """What the worker itself said (``SLURM_JOB_ID``)."""


@dataclass
class _Profile:
    provisioner: Provisioner
    profile: Profile
    outstanding: Request | None = None
    live: dict[str, Request] = field(default_factory=dict)
    last_error: tuple[float, str] | None = None
    failures: int = 0
    resting_until: float | None = None
    rest_timer: asyncio.TimerHandle | None = None
    workers: dict[str, _Brought] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.provisioner.name}/{self.profile.name}"


class ProvisioningDriver:
    def __init__(
        self,
        manager: pluggy.PluginManager,
        provisioners: list[Provisioner],
        engine: EngineSide,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._hook = manager.hook
        self._manager = manager
        self._engine = engine
        self._clock = clock
        self._provisioners = {p.name: p for p in provisioners}
        self._profiles: dict[str, _Profile] = {}
        for provisioner in provisioners:
            manager.register(provisioner, name=f"provisioner:{provisioner.name}")
            for profile in provisioner.settings.profiles:
                entry = _Profile(provisioner, profile)
                self._profiles[entry.key] = entry
        self._tasks: set[asyncio.Task[None]] = set()
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self._closing = False

    # -- what the scheduler sees --------------------------------------------------------

    def scheduler_profiles(self) -> list[SchedulerProfile]:
        """Every profile as the scheduler knows it; outstanding while asked or resting."""
        return [
            SchedulerProfile(
                provisioner=entry.provisioner.name,
                name=entry.profile.name,
                labels=frozenset(entry.profile.labels),
                cpus=entry.profile.cpus,
                gpus=entry.profile.gpus,
                ram_mb=entry.profile.ram_mb,
                outstanding=entry.outstanding is not None or entry.resting_until is not None,
            )
            for entry in self._profiles.values()
        ]

    # -- asked for capacity -------------------------------------------------------------

    def want(self, provisioner: str, profile: str) -> None:
        """A queued node needs a machine of this profile (from the scheduler's plan)."""
        entry = self._profiles.get(f"{provisioner}/{profile}")
        if entry is None or self._closing:
            return
        if entry.outstanding is not None or entry.resting_until is not None:
            return
        request = Request(
            id=secrets.token_hex(8),
            provisioner=provisioner,
            profile=profile,
            created_at=self._clock(),
        )
        entry.outstanding = request
        entry.live[request.id] = request
        self._spawn(self._submit(entry, request))
        self._changed()

    async def _submit(self, entry: _Profile, request: Request) -> None:
        name = entry.provisioner.name
        try:
            token, request.token_jti = self._engine.mint_token(name, entry.profile, request.id)
            submitted: Submission = await self._call(
                self._hook.fluksio_provisioner_submit(
                    provisioner=name, profile=entry.profile.name, request_id=request.id, token=token
                )
            )
        except Exception as exc:
            self._failed(entry, request, _words(exc))
            return
        request.job_id = submitted.job_id
        request.status_since = self._clock()
        if request.stage == "submitting":
            request.stage = "queued"
            self._arm_timeout(entry, request)
        # (else its worker was quicker than the SSH answer, and has attached already)
        self._engine.remember(request)
        log.info("provision.submitted", profile=entry.key, request=request.id, job=request.job_id)
        self._ensure_poller(entry.provisioner)
        if self._closing:
            await self._cancel(entry, request, "the engine is shutting down")

    def recover(self, requests: list[Request]) -> None:
        """Requests an earlier run of the engine submitted: watched again where they left.

        Each is polled, and timed out from when it was submitted; one whose worker has not
        attached is its profile's outstanding request again, so nothing is submitted twice.
        """
        for request in requests:
            entry = self._profiles.get(f"{request.provisioner}/{request.profile}")
            if entry is None:
                # Nothing configured can poll or cancel it any more; its worker must not attach.
                if request.token_jti is not None:
                    reason = "its provisioner profile is no longer configured"
                    self._engine.revoke_token(request.token_jti, reason)
                self._engine.forget(request.id)
                log.warning(
                    "provision.orphaned",
                    profile=f"{request.provisioner}/{request.profile}",
                    job=request.job_id,
                )
                continue
            entry.live[request.id] = request
            if request.stage != "attached":
                entry.outstanding = request
                self._arm_timeout(entry, request)
            self._ensure_poller(entry.provisioner)
        self._changed()

    def _arm_timeout(self, entry: _Profile, request: Request) -> None:
        """Cancel the request if its worker has not attached ``provision_timeout_s`` after
        it was submitted, on its own timer (0: never)."""
        timeout = entry.provisioner.settings.provision_timeout_s
        if timeout > 0:
            request.timer = asyncio.get_running_loop().call_later(
                max(0.0, request.created_at + timeout - self._clock()),
                self._timed_out,
                entry,
                request,
            )

    def _timed_out(self, entry: _Profile, request: Request) -> None:
        if request.stage in ("attached", "ended"):
            return
        timeout = entry.provisioner.settings.provision_timeout_s
        message = (
            f"{self._noun(entry)} {request.job_id} did not attach within {timeout:g} s; cancelled"
        )
        self._spawn(self._cancel(entry, request, message, failed=True))

    async def _cancel(
        self, entry: _Profile, request: Request, message: str, *, failed: bool = False
    ) -> None:
        if request.job_id is not None:
            try:
                await self._call(
                    self._hook.fluksio_provisioner_cancel(
                        provisioner=entry.provisioner.name, job_id=request.job_id
                    )
                )
            except Exception as exc:
                message = f"{message} (cancelling it failed: {_words(exc)})"
        if failed:
            self._failed(entry, request, message)
        else:
            self._ended(entry, request, message)

    # -- outcomes -----------------------------------------------------------------------

    def _failed(self, entry: _Profile, request: Request, message: str) -> None:
        """A request that did not bring a worker: record why, rest, then ask again."""
        self._ended(entry, request, message)
        entry.last_error = (self._clock(), message)
        entry.failures += 1
        settings = entry.provisioner.settings
        rest = min(settings.retry_max_s, settings.retry_base_s * 2 ** (entry.failures - 1))
        entry.resting_until = self._clock() + rest
        log.warning("provision.failed", profile=entry.key, error=message, retry_in_s=rest)
        if not self._closing:
            entry.rest_timer = asyncio.get_running_loop().call_later(rest, self._rested, entry)
        self._changed()

    def _rested(self, entry: _Profile) -> None:
        # Not a submission: the next scheduling pass asks again only if a node still needs it.
        entry.resting_until = None
        entry.rest_timer = None
        self._changed()

    def _ended(self, entry: _Profile, request: Request, outcome: str) -> None:
        if request.stage == "ended":
            return
        request.stage = "ended"
        if request.timer is not None:
            request.timer.cancel()
        entry.live.pop(request.id, None)
        if entry.outstanding is request:
            entry.outstanding = None
        if request.token_jti is not None:
            self._engine.revoke_token(request.token_jti, outcome)
        self._engine.forget(request.id)
        log.info(
            "provision.ended",
            profile=entry.key,
            request=request.id,
            job=request.job_id,
            outcome=outcome,
        )
        self._changed()

    # -- polling ------------------------------------------------------------------------

    def _ensure_poller(self, provisioner: Provisioner) -> None:
        running = self._pollers.get(provisioner.name)
        if running is None or running.done():
            self._pollers[provisioner.name] = self._spawn(self._poll_loop(provisioner))

    async def _poll_loop(self, provisioner: Provisioner) -> None:
        interval = provisioner.settings.poll_interval_s
        while not self._closing:
            await asyncio.sleep(interval)
            watched = [
                (entry, request)
                for entry in self._profiles.values()
                if entry.provisioner is provisioner
                for request in list(entry.live.values())
                if request.job_id is not None
            ]
            if not watched:
                return
            await self._poll_once(provisioner, watched)

    async def _poll_once(
        self, provisioner: Provisioner, watched: list[tuple[_Profile, Request]]
    ) -> None:
        job_ids = sorted({str(request.job_id) for _, request in watched})
        try:
            statuses: Mapping[str, JobStatus] = await self._call(
                self._hook.fluksio_provisioner_poll(provisioner=provisioner.name, job_ids=job_ids)
            )
        except Exception as exc:
            for entry, request in watched:
                if request.stage != "attached":
                    entry.last_error = (self._clock(), f"polling failed: {_words(exc)}")
            return
        for entry, request in watched:
            if request.stage == "ended":
                continue
            status = statuses.get(str(request.job_id))
            if status is None or status.state in TERMINAL_STATES:
                self._job_ended(entry, request, status)
                continue
            if request.status is None or request.status != status:
                request.status = status
                request.status_since = self._clock()
            if status.state is JobState.RUNNING and request.stage == "queued":
                request.stage = "started"

    def _job_ended(self, entry: _Profile, request: Request, status: JobStatus | None) -> None:
        how = f"ended {status.describe()}" if status is not None else "left the queue"
        what = f"{self._noun(entry)} {request.job_id} {how}"
        if request.stage == "attached":
            self._ended(entry, request, what)
        else:
            self._failed(entry, request, f"{what} before its worker attached")

    # -- workers ------------------------------------------------------------------------

    def worker_attached(self, event: WorkerEvent) -> None:
        self._hook.fluksio_worker_attached(worker=event)
        entry = self._entry_of(event)
        if entry is None:
            return
        request = entry.live.get(str(event.request_id))
        entry.workers[event.worker_id] = _Brought(event.name, self._clock(), request, event.job_id)
        if request is None:
            return  # a request of an earlier engine run: welcome, nothing to fulfil
        request.stage = "attached"
        request.attached_at = self._clock()
        if request.job_id is not None:  # else the submission, still answering, keeps it
            self._engine.remember(request)
        if request.timer is not None:
            request.timer.cancel()
        if entry.outstanding is request:
            entry.outstanding = None
        entry.last_error = None
        entry.failures = 0
        self._changed()

    def worker_gone(self, event: WorkerEvent) -> None:
        self._hook.fluksio_worker_gone(worker=event)
        entry = self._entry_of(event)
        if entry is not None:
            entry.workers.pop(event.worker_id, None)

    def _entry_of(self, event: WorkerEvent) -> _Profile | None:
        if event.provisioner is None or event.profile is None:
            return None
        return self._profiles.get(f"{event.provisioner}/{event.profile}")

    # -- what users see -----------------------------------------------------------------

    def describe(self, key: str) -> str | None:
        """How the profile's provisioning stands, for a queued node's reason; None: idle."""
        entry = self._profiles.get(key)
        if entry is None:
            return None
        request = entry.outstanding
        if request is not None:
            return self._describe_request(entry, request)
        if entry.last_error is None:
            return None
        said = f"the last attempt failed ({entry.last_error[1]})"
        if entry.resting_until is None:
            return said
        return f"{said}; trying again in {max(0.0, entry.resting_until - self._clock()):.0f} s"

    def _describe_request(self, entry: _Profile, request: Request) -> str:
        noun = self._noun(entry)
        if request.stage == "submitting":
            return f"submitting a {noun}"
        status = request.status.describe() if request.status else "submitted"
        if request.stage == "started":
            return f"{noun} {request.job_id} {status}, waiting for its worker to attach"
        return f"{noun} {request.job_id} {status}"

    def view(self) -> list[dict[str, Any]]:
        """Per provisioner and profile: the outstanding request, the last error, workers."""
        by_provisioner: dict[str, dict[str, Any]] = {}
        for entry in self._profiles.values():
            provisioner = entry.provisioner
            block = by_provisioner.setdefault(
                provisioner.name,
                {"name": provisioner.name, "type": provisioner.type_name, "profiles": []},
            )
            request = entry.outstanding
            block["profiles"].append(
                {
                    "name": entry.profile.name,
                    "labels": entry.profile.labels,
                    "cpus": entry.profile.cpus,
                    "gpus": entry.profile.gpus,
                    "ram_mb": entry.profile.ram_mb,
                    "outstanding": self._request_view(request) if request else None,
                    "jobs": [self._request_view(r) for r in entry.live.values()],
                    "last_error": {"at": entry.last_error[0], "message": entry.last_error[1]}
                    if entry.last_error
                    else None,
                    "retry_at": entry.resting_until,
                    "failures": entry.failures,
                    "workers": [
                        {
                            "id": worker_id,
                            "name": brought.name,
                            # The request's job id is known only once sbatch has answered.
                            "job_id": brought.request.job_id
                            if brought.request is not None and brought.request.job_id
                            else brought.reported_job_id,
                            "attached_at": brought.attached_at,
                        }
                        for worker_id, brought in entry.workers.items()
                    ],
                }
            )
        return list(by_provisioner.values())

    @staticmethod
    def _request_view(request: Request) -> dict[str, Any]:
        return {
            "request_id": request.id,
            "job_id": request.job_id,
            "stage": request.stage,
            "state": request.status.native if request.status else None,
            "reason": request.status.reason if request.status else None,
            "since": request.status_since or request.created_at,
            "submitted_at": request.created_at,
        }

    def _noun(self, entry: _Profile) -> str:
        return entry.provisioner.job_noun

    # -- plumbing -----------------------------------------------------------------------

    def _changed(self) -> None:
        # While closing, what ends must not make the engine plan (and ask) again.
        if not self._closing:
            self._engine.changed()

    async def _call(self, answer: Awaitable[T] | None) -> T:
        if answer is None:
            raise ProvisionError("no installed plugin answered for this provisioner")
        return await answer

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Cancel every request whose worker has not attached; close the provisioners."""
        self._closing = True
        for entry in self._profiles.values():
            if entry.rest_timer is not None:
                entry.rest_timer.cancel()
        for poller in self._pollers.values():
            poller.cancel()
        submitting = [t for t in self._tasks if t not in self._pollers.values()]
        if submitting:
            await asyncio.wait(submitting, timeout=SHUTDOWN_CANCEL_S)
        cancels = [
            self._cancel(entry, request, "the engine is shutting down")
            for entry in self._profiles.values()
            for request in list(entry.live.values())
            if request.stage != "attached"
        ]
        if cancels:
            await asyncio.wait(
                [asyncio.ensure_future(c) for c in cancels], timeout=SHUTDOWN_CANCEL_S
            )
        for provisioner in self._provisioners.values():
            with contextlib.suppress(Exception):
                await provisioner.close()
            self._manager.unregister(name=f"provisioner:{provisioner.name}")


def _words(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
