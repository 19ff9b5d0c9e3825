"""The engine's side of provisioning: one request per profile, polled, timed out, retried.

The scheduler says *which* profile a queued call needs (its plan's asks); this driver owns
everything that happens next, by awaiting the provisioners' own methods
(:class:`~fluksio.provisioners.base.Provisioner`):

- at most one request per profile is pending (submitted, its worker not attached),
  however often it is asked for, and at most ``max_workers`` are alive at once, at every
  instant: a request counts from the moment it is made until its provisioner says its
  job ended (or it is known never to have been submitted), whatever its walltime, its
  worker or an engine restart. A worker that retires (drained before its job's end)
  frees its slot when its job ends, which the driver polls for at once; it is
  written down before it is submitted, and a submission is sent once: one whose answer
  was lost (a timeout, an engine killed mid-submission) is looked for by the mark its job
  carries (:meth:`~fluksio.provisioners.base.Provisioner.find`) at the next poll, adopted
  if found, and counted as never submitted if not;
- every live request of a provisioner is polled in one call per ``poll_interval_s``: a
  job that ends before its worker attached is a failure, noticed at that poll;
- a request whose worker has not attached within ``provision_timeout_s`` is cancelled on
  its own timer (0: never);
- a failure is kept as the profile's last error (with the outside system's words) and the
  profile rests for a capped, doubling backoff; then the engine's next scheduling pass
  asks again if the need is still there (never twice for one need);
- a worker attaching with a request's token fulfils it, clears the last error, and stays
  tied to it; the request's token is revoked when its job ends;
- every request that ends without its worker attaching is cancelled through its
  provisioner, which also removes what the submission left (a token file);
- at shutdown every request whose worker has not attached is cancelled.

The driver is the one source of how each profile's provisioning stands: after every
change it calls ``on_change``, and its owner reads :meth:`ProvisioningDriver.
scheduler_profiles` (for the scheduler) and :meth:`~ProvisioningDriver.profiles` (for
the API). Time comes from a :class:`~fluksio.provisioners.clock.Clock`, so tests
advance it instead of waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobState,
    JobStatus,
    ProfileSettings,
    Provisioner,
    ProvisionError,
    WorkerEvent,
)
from fluksio.provisioners.clock import Clock, LoopClock, Timer
from fluksio.scheduler import Profile, Provisioning, RequestStage

__all__ = [
    "BroughtWorker",
    "EngineSide",
    "MachineRequest",
    "ProfileStatus",
    "ProvisioningDriver",
    "ProvisioningObserver",
    "login_sentence",
]

log = structlog.get_logger(__name__)
# Cancelling at shutdown must not hold the engine up behind an unreachable login node.
SHUTDOWN_CANCEL_S = 20.0
POLL_SOON_S = 1.0
"""After a worker of a request leaves, its job is polled this soon: its slot under
``max_workers`` is free once the job has ended, and a replacement may be waiting."""
_PENDING_STAGES = frozenset({RequestStage.SUBMITTING, RequestStage.QUEUED, RequestStage.STARTED})


class EngineSide(Protocol):
    """What the driver needs from the engine: tokens, and somewhere durable to write."""

    def mint_token(
        self, provisioner: str, profile: ProfileSettings, request_id: str
    ) -> tuple[str, str]:
        """A worker token for one request (24 h, the profile's labels): (token, jti)."""
        ...

    def revoke_token(self, jti: str, reason: str) -> None: ...

    def remember(self, request: MachineRequest) -> None:
        """Keep a submitted request (and its stage) where a restarted engine finds it."""
        ...

    def forget(self, request_id: str) -> None: ...


@dataclass
class MachineRequest:
    """One machine asked of a provisioner, and where it stands from the engine's side."""

    id: str
    provisioner: str
    profile: str
    created_at: float
    stage: RequestStage = RequestStage.SUBMITTING
    job_id: str | None = None
    status: JobStatus | None = None
    status_since: float | None = None
    token_jti: str | None = None
    attached_at: float | None = None
    answer_lost: str | None = None
    """Why the submission's answer never came (it may have queued a job): look for it."""
    timer: Timer | None = None


@dataclass(frozen=True)
class BroughtWorker:
    """A worker a request of a profile brought, while it is attached."""

    worker_id: str
    name: str
    attached_at: float
    job_id: str | None
    """The request's job id, else what the worker itself reported (``SLURM_JOB_ID``)."""


@dataclass(frozen=True)
class ProfileStatus:
    """How one profile stands, for the API to show: read-only."""

    provisioner: str
    type_name: str
    profile: ProfileSettings
    outstanding: MachineRequest | None
    jobs: tuple[MachineRequest, ...]
    last_error: tuple[float, str] | None
    retry_at: float | None
    failures: int
    workers: tuple[BroughtWorker, ...]
    login_needed: str | None = None
    """``login needed: run 'fluksio provisioners login hpc'`` while nothing can be
    submitted or polled until a person logs in."""


@dataclass
class _Brought:
    name: str
    attached_at: float
    request: MachineRequest | None
    """None for a worker whose request an earlier engine run made and this one never saw."""
    reported_job_id: str | None


@dataclass
class _Profile:
    provisioner: Provisioner[Any, Any]
    profile: ProfileSettings
    outstanding: MachineRequest | None = None
    live: dict[str, MachineRequest] = field(default_factory=dict)
    last_error: tuple[float, str] | None = None
    failures: int = 0
    resting_until: float | None = None
    rest_timer: Timer | None = None
    workers: dict[str, _Brought] = field(default_factory=dict)
    login_needed: str | None = None

    @property
    def key(self) -> str:
        return f"{self.provisioner.name}/{self.profile.name}"


class ProvisioningObserver(Protocol):
    """Told what happens to machine requests, for the engine's metrics."""

    def submitted(self, provisioner: str, profile: str) -> None:
        """A request was submitted and its system took it (a job id came back)."""

    def failed(self, provisioner: str, profile: str) -> None:
        """A request ended without bringing a worker (refused, timed out, job ended)."""

    def attached(self, provisioner: str, profile: str, seconds: float) -> None:
        """A request's worker attached, ``seconds`` after the request was made."""


class _Unobserved:
    def submitted(self, provisioner: str, profile: str) -> None:
        pass

    def failed(self, provisioner: str, profile: str) -> None:
        pass

    def attached(self, provisioner: str, profile: str, seconds: float) -> None:
        pass


class ProvisioningDriver:
    """Submits, polls, times out and cancels machine requests for the configured profiles.

    ``on_change`` is called after anything that changes how a profile stands.
    """

    def __init__(
        self,
        provisioners: Sequence[Provisioner[Any, Any]],
        engine: EngineSide,
        *,
        on_change: Callable[[], None],
        clock: Clock | None = None,
        observer: ProvisioningObserver | None = None,
    ) -> None:
        self._engine = engine
        self._on_change = on_change
        self._observer: ProvisioningObserver = observer or _Unobserved()
        self._clock: Clock = clock or LoopClock()
        self._provisioners = {p.name: p for p in provisioners}
        self._profiles: dict[str, _Profile] = {}
        for provisioner in provisioners:
            for profile in provisioner.settings.profiles:
                entry = _Profile(provisioner, profile)
                self._profiles[entry.key] = entry
        self._tasks: set[asyncio.Task[None]] = set()
        self._poll_timers: dict[str, Timer] = {}
        self._polling: dict[str, asyncio.Task[None]] = {}
        self._closing = False

    # -- what the scheduler sees --------------------------------------------------------

    def scheduler_profiles(self) -> list[Profile]:
        """Every profile as the scheduler knows it, with how its provisioning stands."""
        return [
            Profile(
                provisioner=entry.provisioner.name,
                name=entry.profile.name,
                labels=frozenset(entry.profile.labels),
                cpus=entry.profile.cpus,
                gpus=entry.profile.gpus,
                ram_mb=entry.profile.ram_mb,
                provisioning=self._provisioning(entry),
                max_workers=entry.profile.max_workers,
                walltime_s=entry.provisioner.walltime_s(entry.profile),
            )
            for entry in self._profiles.values()
        ]

    @staticmethod
    def _provisioning(entry: _Profile) -> Provisioning:
        request = entry.outstanding
        return Provisioning(
            noun=entry.provisioner.job_noun,
            stage=request.stage if request is not None else None,
            job_id=request.job_id if request is not None else None,
            status=_status_text(entry, request),
            last_error=entry.last_error[1] if entry.last_error else None,
            retry_at=entry.resting_until,
            jobs=_counted(entry),
            attached=sum(r.stage is RequestStage.ATTACHED for r in entry.live.values()),
            login_needed=entry.login_needed,
        )

    # -- asked for capacity -------------------------------------------------------------

    def want(self, provisioner: str, profile: str) -> None:
        """A queued call needs a machine of this profile (from the scheduler's plan).

        Asked for only while none is pending, the profile does not rest, and fewer than
        its ``max_workers`` jobs exist.
        """
        entry = self._profiles.get(f"{provisioner}/{profile}")
        if entry is None or self._closing:
            return
        if entry.outstanding is not None or entry.resting_until is not None:
            return
        if _counted(entry) >= entry.profile.max_workers:
            return
        request = MachineRequest(
            id=secrets.token_hex(8),
            provisioner=provisioner,
            profile=profile,
            created_at=self._clock.now(),
        )
        entry.outstanding = request
        entry.live[request.id] = request
        self._spawn(self._submit(entry, request))
        self._changed()

    async def _submit(self, entry: _Profile, request: MachineRequest) -> None:
        try:
            if entry.login_needed is not None and await entry.provisioner.login_needed():
                self._wait_for_login(entry, request, "still no login")
                return
            token, request.token_jti = self._engine.mint_token(
                entry.provisioner.name, entry.profile, request.id
            )
            # Written down first: an engine killed mid-submission looks for the job later.
            self._engine.remember(request)
            submitted = await entry.provisioner.submit(
                entry.profile, request_id=request.id, token=token
            )
        except ProvisionError as exc:
            if exc.login_needed:
                self._wait_for_login(entry, request, exc.detail)
            elif exc.uncertain:
                self._answer_lost(entry, request, exc.detail)
            else:
                self._failed(entry, request, exc.detail)
            return
        except Exception as exc:
            self._failed(entry, request, _words(exc))
            return
        entry.login_needed = None
        request.job_id = submitted.job_id
        request.status_since = self._clock.now()
        if request.stage is RequestStage.ENDED:
            # Given up on (timed out) before the answer came: its job must not run unwatched.
            self._spawn(self._clean_up(entry.provisioner, request))
            return
        if request.stage is RequestStage.SUBMITTING:
            request.stage = RequestStage.QUEUED
            self._arm_timeout(entry, request)
        # (else its worker was quicker than the submission's answer, and attached already)
        self._record("remember", self._engine.remember, request)
        log.info("provision.submitted", profile=entry.key, request=request.id, job=request.job_id)
        self._observer.submitted(entry.provisioner.name, entry.profile.name)
        self._ensure_poller(entry.provisioner)
        self._changed()
        if self._closing:
            await self._cancel(entry, request, "the engine is shutting down")

    def _answer_lost(self, entry: _Profile, request: MachineRequest, message: str) -> None:
        """A submission that may have queued a job: looked for at the next poll, not redone."""
        if request.stage is RequestStage.ENDED:
            return
        request.answer_lost = message
        if request.stage is RequestStage.SUBMITTING:
            self._arm_timeout(entry, request)
        log.warning("provision.answer_lost", profile=entry.key, request=request.id, error=message)
        self._ensure_poller(entry.provisioner)
        self._changed()

    def recover(self, requests: list[MachineRequest]) -> None:
        """Requests an earlier run of the engine submitted: watched again where they left.

        Each is polled, and timed out from when it was submitted; one whose worker has not
        attached is its profile's outstanding request again, so nothing is submitted twice.
        One whose submission never answered before the engine stopped is looked for.
        """
        for request in requests:
            entry = self._profiles.get(f"{request.provisioner}/{request.profile}")
            if entry is None:
                # Nothing configured can poll or cancel it any more; its worker must not attach.
                if request.token_jti is not None:
                    reason = "its provisioner profile is no longer configured"
                    self._record(
                        "revoke_token", self._engine.revoke_token, request.token_jti, reason
                    )
                self._record("forget", self._engine.forget, request.id)
                log.warning(
                    "provision.orphaned",
                    profile=f"{request.provisioner}/{request.profile}",
                    job=request.job_id,
                )
                continue
            entry.live[request.id] = request
            if request.job_id is None:
                request.answer_lost = "the engine stopped before the submission answered"
            if request.stage is not RequestStage.ATTACHED:
                entry.outstanding = request
                self._arm_timeout(entry, request)
            self._ensure_poller(entry.provisioner)
        self._changed()

    def _arm_timeout(self, entry: _Profile, request: MachineRequest) -> None:
        """Cancel the request if its worker has not attached ``provision_timeout_s`` after
        it was submitted, on its own timer (0: never)."""
        timeout = entry.provisioner.settings.provision_timeout_s
        if timeout > 0:
            request.timer = self._clock.call_later(
                request.created_at + timeout - self._clock.now(),
                lambda: self._timed_out(entry, request),
            )

    def _timed_out(self, entry: _Profile, request: MachineRequest) -> None:
        if request.stage not in _PENDING_STAGES:
            return
        timeout = entry.provisioner.settings.provision_timeout_s
        noun = entry.provisioner.job_noun
        job = f"{noun} {request.job_id}" if request.job_id else f"the {noun}"
        message = f"{job} did not attach within {timeout:g} s; cancelled"
        self._spawn(self._cancel(entry, request, message, failed=True))

    async def _cancel(
        self, entry: _Profile, request: MachineRequest, message: str, *, failed: bool = False
    ) -> None:
        try:
            if request.job_id is None and request.answer_lost is not None:
                # A last look: a job found now is cancelled, not left to run unwatched.
                found = await entry.provisioner.find([request.id])
                request.job_id = found.get(request.id)
            await entry.provisioner.cancel(request.job_id, request_id=request.id)
        except Exception as exc:
            message = f"{message} (cancelling it failed: {_words(exc)})"
        if failed:
            self._failed(entry, request, message)
        else:
            self._ended(entry, request, message)

    # -- outcomes -----------------------------------------------------------------------

    def _failed(self, entry: _Profile, request: MachineRequest, message: str) -> None:
        """A request that did not bring a worker: record why, rest, then ask again."""
        self._ended(entry, request, message)
        self._observer.failed(entry.provisioner.name, entry.profile.name)
        entry.last_error = (self._clock.now(), message)
        entry.failures += 1
        settings = entry.provisioner.settings
        rest = min(settings.retry_max_s, settings.retry_base_s * 2 ** (entry.failures - 1))
        log.warning("provision.failed", profile=entry.key, error=message, retry_in_s=rest)
        self._rest(entry, rest)

    def _wait_for_login(self, entry: _Profile, request: MachineRequest, detail: str) -> None:
        """Nothing was sent: a person must log in. Not a failure (no backoff grows); the
        profile is looked at again after one poll interval, locally, until they have."""
        if entry.login_needed is None:
            log.warning("provision.login_needed", profile=entry.key, detail=detail)
        entry.login_needed = login_sentence(entry.provisioner.name)
        if request.token_jti is not None:
            self._ended(entry, request, entry.login_needed)  # its token is revoked
        else:  # minted nothing, wrote nothing, reached nothing: no trace to leave
            entry.live.pop(request.id, None)
            if entry.outstanding is request:
                entry.outstanding = None
            request.stage = RequestStage.ENDED
        self._rest(entry, entry.provisioner.settings.poll_interval_s)

    def _rest(self, entry: _Profile, seconds: float) -> None:
        """The profile is not asked for again for ``seconds``; then the next pass may."""
        entry.resting_until = self._clock.now() + seconds
        if not self._closing:
            entry.rest_timer = self._clock.call_later(seconds, lambda: self._rested(entry))
        self._changed()

    def _rested(self, entry: _Profile) -> None:
        # Not a submission: the next scheduling pass asks again only if a call still needs it.
        entry.resting_until = None
        entry.rest_timer = None
        self._changed()

    def _ended(self, entry: _Profile, request: MachineRequest, outcome: str) -> None:
        if request.stage is RequestStage.ENDED:
            return
        request.stage = RequestStage.ENDED
        if request.timer is not None:
            request.timer.cancel()
        entry.live.pop(request.id, None)
        if entry.outstanding is request:
            entry.outstanding = None
        if request.token_jti is not None:
            self._record("revoke_token", self._engine.revoke_token, request.token_jti, outcome)
        self._record("forget", self._engine.forget, request.id)
        log.info(
            "provision.ended",
            profile=entry.key,
            request=request.id,
            job=request.job_id,
            outcome=outcome,
        )
        self._changed()

    # -- polling ------------------------------------------------------------------------

    def _watched(self, provisioner: Provisioner[Any, Any]) -> list[tuple[_Profile, MachineRequest]]:
        """Live requests with a job to poll, or a lost submission to look for."""
        return [
            (entry, request)
            for entry in self._profiles.values()
            if entry.provisioner is provisioner
            for request in list(entry.live.values())
            if request.job_id is not None or request.answer_lost is not None
        ]

    def _ensure_poller(self, provisioner: Provisioner[Any, Any]) -> None:
        name = provisioner.name
        if self._closing or name in self._poll_timers or name in self._polling:
            return
        self._poll_timers[name] = self._clock.call_later(
            provisioner.settings.poll_interval_s, lambda: self._poll_due(provisioner)
        )

    def _poll_soon(self, provisioner: Provisioner[Any, Any]) -> None:
        """Poll in :data:`POLL_SOON_S` instead of at the interval (once one is due anyway)."""
        name = provisioner.name
        if self._closing or name in self._polling:
            return
        timer = self._poll_timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        self._poll_timers[name] = self._clock.call_later(
            min(POLL_SOON_S, provisioner.settings.poll_interval_s),
            lambda: self._poll_due(provisioner),
        )

    def _poll_due(self, provisioner: Provisioner[Any, Any]) -> None:
        self._poll_timers.pop(provisioner.name, None)
        watched = self._watched(provisioner)
        if watched and not self._closing:
            self._polling[provisioner.name] = self._spawn(self._poll(provisioner, watched))

    async def _poll(
        self, provisioner: Provisioner[Any, Any], watched: list[tuple[_Profile, MachineRequest]]
    ) -> None:
        try:
            await self._poll_once(provisioner, watched)
        finally:
            self._polling.pop(provisioner.name, None)
        if self._watched(provisioner):
            self._ensure_poller(provisioner)

    async def _poll_once(
        self, provisioner: Provisioner[Any, Any], watched: list[tuple[_Profile, MachineRequest]]
    ) -> None:
        lost = [(e, r) for e, r in watched if r.job_id is None]
        if lost:
            await self._look_for(provisioner, lost)
        watched = [(e, r) for e, r in watched if r.job_id is not None]
        if not watched:
            return
        job_ids = sorted({str(request.job_id) for _, request in watched})
        try:
            statuses: Mapping[str, JobStatus] = await provisioner.poll(job_ids)
        except Exception as exc:
            login = isinstance(exc, ProvisionError) and exc.login_needed
            for entry, request in watched:
                if login:
                    entry.login_needed = login_sentence(provisioner.name)
                if request.stage is not RequestStage.ATTACHED:
                    entry.last_error = (self._clock.now(), f"polling failed: {_words(exc)}")
            self._changed()
            return
        for entry, request in watched:
            entry.login_needed = None
            if request.stage is RequestStage.ENDED:
                continue
            status = statuses.get(str(request.job_id))
            if status is None or status.state in TERMINAL_STATES:
                self._job_ended(entry, request, status)
                continue
            if request.status is None or request.status != status:
                request.status = status
                request.status_since = self._clock.now()
            if status.state is JobState.RUNNING and request.stage is RequestStage.QUEUED:
                request.stage = RequestStage.STARTED
        self._changed()

    async def _look_for(
        self, provisioner: Provisioner[Any, Any], lost: list[tuple[_Profile, MachineRequest]]
    ) -> None:
        """Adopt the job of each lost submission that was found; the others never were."""
        try:
            found = await provisioner.find(sorted(request.id for _, request in lost))
        except Exception as exc:
            failed = (self._clock.now(), f"looking for a job failed: {_words(exc)}")
            for entry, _request in lost:  # looked for again at the next poll
                entry.last_error = failed
            self._changed()
            return
        for entry, request in lost:
            if request.stage is RequestStage.ENDED or request.job_id is not None:
                continue
            job_id = found.get(request.id)
            if job_id is not None:
                request.job_id, request.answer_lost = job_id, None
                request.status_since = self._clock.now()
                if request.stage is RequestStage.SUBMITTING:
                    request.stage = RequestStage.QUEUED
                self._record("remember", self._engine.remember, request)
                log.info("provision.found", profile=entry.key, request=request.id, job=job_id)
            elif request.stage is not RequestStage.ATTACHED:
                noun = provisioner.job_noun
                message = f"{request.answer_lost}; no {noun} of it was found, submitting again"
                request.answer_lost = None  # looked for: the cancel only cleans up
                self._spawn(self._cancel(entry, request, message, failed=True))

    def _job_ended(
        self, entry: _Profile, request: MachineRequest, status: JobStatus | None
    ) -> None:
        how = f"ended {status.describe()}" if status is not None else "left the queue"
        what = f"{entry.provisioner.job_noun} {request.job_id} {how}"
        if request.stage is RequestStage.ATTACHED:
            self._ended(entry, request, what)
        else:
            self._failed(entry, request, f"{what} before its worker attached")
            # Ended before its worker read what the submission left for it (a token file).
            self._spawn(self._clean_up(entry.provisioner, request))

    async def _clean_up(self, provisioner: Provisioner[Any, Any], request: MachineRequest) -> None:
        try:
            await provisioner.cancel(request.job_id, request_id=request.id)
        except Exception as exc:
            log.warning("provision.cleanup_failed", request=request.id, error=_words(exc))

    # -- workers ------------------------------------------------------------------------

    def worker_attached(self, event: WorkerEvent) -> None:
        self._tell_provisioners(event, attached=True)
        entry = self._entry_of(event)
        if entry is None:
            return
        request = entry.live.get(str(event.request_id))
        entry.workers[event.worker_id] = _Brought(
            event.name, self._clock.now(), request, event.job_id
        )
        if request is None:
            return  # a request of an earlier engine run: welcome, nothing to fulfil
        request.stage = RequestStage.ATTACHED
        request.attached_at = self._clock.now()
        waited = request.attached_at - request.created_at
        self._observer.attached(entry.provisioner.name, entry.profile.name, waited)
        self._record("remember", self._engine.remember, request)
        if request.timer is not None:
            request.timer.cancel()
        if entry.outstanding is request:
            entry.outstanding = None
        entry.last_error = None
        entry.failures = 0
        self._changed()

    def worker_gone(self, event: WorkerEvent) -> None:
        self._tell_provisioners(event, attached=False)
        entry = self._entry_of(event)
        if entry is None:
            return
        brought = entry.workers.pop(event.worker_id, None)
        if brought is not None and brought.request is not None:
            # Its job is likely ending (drained, idle, or the job itself ended): its slot
            # is free once the provisioner says so, so ask soon rather than at the
            # interval, lest a replacement wait for nothing.
            self._poll_soon(entry.provisioner)

    def _tell_provisioners(self, event: WorkerEvent, *, attached: bool) -> None:
        for provisioner in self._provisioners.values():
            if attached:
                provisioner.worker_attached(event)
            else:
                provisioner.worker_gone(event)

    def _entry_of(self, event: WorkerEvent) -> _Profile | None:
        if event.provisioner is None or event.profile is None:
            return None
        return self._profiles.get(f"{event.provisioner}/{event.profile}")

    # -- what users see -----------------------------------------------------------------

    def profiles(self) -> list[ProfileStatus]:
        """Every profile: its outstanding request, live jobs, last error and workers."""
        return [
            ProfileStatus(
                provisioner=entry.provisioner.name,
                type_name=entry.provisioner.type_name,
                profile=entry.profile,
                outstanding=entry.outstanding,
                jobs=tuple(entry.live.values()),
                last_error=entry.last_error,
                retry_at=entry.resting_until,
                failures=entry.failures,
                login_needed=entry.login_needed,
                workers=tuple(
                    BroughtWorker(
                        worker_id=worker_id,
                        name=brought.name,
                        attached_at=brought.attached_at,
                        # The request's job id is known only once the submission answered.
                        job_id=brought.request.job_id
                        if brought.request is not None and brought.request.job_id
                        else brought.reported_job_id,
                    )
                    for worker_id, brought in entry.workers.items()
                ),
            )
            for entry in self._profiles.values()
        ]

    def now(self) -> float:
        return self._clock.now()

    # -- plumbing -----------------------------------------------------------------------

    def _record(self, what: str, write: Callable[..., None], *args: Any) -> None:
        """Write down a change to a request already under way, or say it could not be.

        Memory stays the truth while the engine runs; a write the engine's disk refused
        (it is full) must not stop the request being polled, timed out or ended. Only the
        first write, before anything is submitted, is allowed to fail a request.
        """
        try:
            write(*args)
        except Exception as exc:
            log.error("provision.not_recorded", what=what, error=_words(exc))

    def _changed(self) -> None:
        # While closing, what ends must not make the engine plan (and ask) again.
        if not self._closing:
            self._on_change()

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
        for timer in self._poll_timers.values():
            timer.cancel()
        for poll in self._polling.values():
            poll.cancel()
        polls = set(self._polling.values())
        submitting = [t for t in self._tasks if t not in polls]
        if submitting:
            await asyncio.wait(submitting, timeout=SHUTDOWN_CANCEL_S)
        cancels = [
            self._cancel(entry, request, "the engine is shutting down")
            for entry in self._profiles.values()
            for request in list(entry.live.values())
            if request.stage is not RequestStage.ATTACHED
        ]
        if cancels:
            await asyncio.wait(
                [asyncio.ensure_future(c) for c in cancels], timeout=SHUTDOWN_CANCEL_S
            )
        for provisioner in self._provisioners.values():
            with contextlib.suppress(Exception):
                await provisioner.close()


def _counted(entry: _Profile) -> int:
    """The profile's jobs alive, every one of which counts against ``max_workers``: from the
    moment a request is made until its job is known to have ended."""
    return len(entry.live)


def _status_text(entry: _Profile, request: MachineRequest | None) -> str | None:
    if request is None:
        return None
    if request.answer_lost is not None:
        noun = entry.provisioner.job_noun
        return f"its answer was lost ({request.answer_lost}); looking for the {noun} by its mark"
    return request.status.describe() if request.status else None


def login_sentence(provisioner: str) -> str:
    """What a profile shows while it waits for a person to log in."""
    return f"login needed: run 'fluksio provisioners login {provisioner}'"


def _words(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
