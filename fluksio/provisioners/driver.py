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
  asks again if the need is still there (never twice for one need); after
  ``pause_after_failed_submissions`` refusals in a row, or ``pause_after_failed_starts``
  jobs in a row that brought no worker, it pauses itself until a person resumes it (a
  person may pause it too, and that pause outlasts the engine);
- a provisioner that reads its site's limits (Slurm's accounting and partitions) reads
  them at its first need, before anything goes out, and every five minutes after: no
  profile has more jobs alive than its site allows, and one the site refuses is not
  asked for;
- a worker attaching with a request's token fulfils it, clears the last error, and stays
  tied to it; the request's token is revoked when its job ends;
- every request that ends without its worker attaching is cancelled through its
  provisioner, which also removes what the submission left (a token file);
- at shutdown every request whose worker has not attached is cancelled, written down as
  withdrawn first: a cancel the engine stops before it answers is sent again by the next
  engine, and a withdrawn job's end is never a failed start.

Each of these rules lives once, in the pure :class:`~fluksio.provisioners.machine.provisioning.
ProvisioningMachine`; this driver is its asynchronous shell: it awaits the provisioners'
methods, writes through the engine's side, keeps the machine's timers on a
:class:`~fluksio.clock.Clock` (tests advance it instead of waiting) and hands
every answer back to the machine. The machine is the one source of how each profile's
provisioning stands: after every change the driver calls ``on_change``, and its owner
reads :meth:`ProvisioningDriver.scheduler_profiles` (for the scheduler) and
:meth:`~ProvisioningDriver.profiles` (for the API).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, assert_never

from fluksio.clock import Clock, SystemClock, Timer
from fluksio.logs import get_logger
from fluksio.provisioners.base import ProvisionError, WorkerRecord
from fluksio.provisioners.engine_side import EngineSide
from fluksio.provisioners.events import (
    CommandRan,
    ProvisioningEvent,
    RequestAttached,
    RequestFailed,
    RequestSubmitted,
)
from fluksio.provisioners.login import shared_login
from fluksio.provisioners.machine.effects import (
    AskBackend,
    Cancel,
    Changed,
    CleanUp,
    Effect,
    Forget,
    Log,
    Observe,
    ReadSite,
    Remember,
    RememberPause,
    RememberSite,
    Revoke,
    StartPoll,
    Submit,
    Unwake,
    Wake,
    WriteDown,
)
from fluksio.provisioners.machine.provisioning import ProvisioningMachine
from fluksio.provisioners.machine.requests import MachineRequest, ProfileRule, ProfileStatus
from fluksio.provisioners.provisioner import EngineLink, Provisioner
from fluksio.provisioners.site_reader import SiteReader
from fluksio.scheduler import Profile

__all__ = ["EngineSide", "ProvisioningDriver"]

log = get_logger(__name__)
# Cancelling at shutdown must not hold the engine up behind an unreachable login node: a
# stop ends within 10 s (fluksio.engine.holding), and a cancel it did not finish is
# finished by the next engine, which finds the request withdrawn.
SHUTDOWN_CANCEL_S = 3.0


class ProvisioningDriver:
    """Carries the provisioning machine's effects out: submits, polls, cancels, timers.

    ``on_change`` is called after anything that changes how a profile stands; what happens
    to requests and remote commands is given to ``emit`` (the engine's event stream). Each
    provisioner is started here, told ``engine_address`` (where the engine listens) and
    given what it reports to.
    """

    def __init__(
        self,
        provisioners: Sequence[Provisioner[Any, Any]],
        engine: EngineSide,
        *,
        on_change: Callable[[], None],
        emit: Callable[[ProvisioningEvent], None] = lambda _event: None,
        clock: Clock | None = None,
        engine_address: tuple[str, int] | None = None,
    ) -> None:
        self._engine = engine
        self._on_change = on_change
        self._emit = emit
        self._clock: Clock = clock or SystemClock()
        self._provisioners = {p.name: p for p in provisioners}
        for provisioner in provisioners:
            command_ran = functools.partial(self._command_ran, provisioner.name)
            provisioner.start(EngineLink(engine_address, command_ran, on_change))
        self._machine = ProvisioningMachine(
            [
                ProfileRule(
                    provisioner=p.name,
                    type_name=p.type_name,
                    job_noun=p.job_noun,
                    starting=p.starting(profile),
                    settings=p.settings,
                    profile=profile,
                    walltime_s=p.walltime_s(profile),
                    # Read from its first need on: an engine that never needs a site
                    # never reaches it.
                    reads_site=type(p).site_limits is not Provisioner.site_limits,
                )
                for p in provisioners
                for profile in p.settings.profiles
            ],
            new_id=lambda: secrets.token_hex(8),
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: dict[str, Timer] = {}
        self._polls: dict[str, asyncio.Task[None]] = {}
        self._sites = SiteReader(
            self._provisioners,
            self._clock,
            read=lambda name, limits: self._apply(self._machine.site_read(name, limits)),
            unread=lambda name: self._apply(self._machine.site_unread(name)),
        )
        self._closing = False

    # -- what the scheduler and the API see ---------------------------------------------

    def scheduler_profiles(self) -> list[Profile]:
        """Every profile as the scheduler knows it, with how its provisioning stands."""
        paths_down = {
            name: down for name, p in self._provisioners.items() if (down := p.path_down())
        }
        return self._machine.scheduler_profiles(paths_down)

    def profiles(self) -> list[ProfileStatus]:
        """Every profile: its outstanding request, live jobs, last error and workers, and
        whether its workers can reach the engine (a live condition, not the machine's)."""
        return [
            replace(status, path_down=self._provisioners[status.provisioner].path_down())
            for status in self._machine.profiles()
        ]

    def job_of(self, provisioner: str, profile: str, request_id: str) -> tuple[str, str] | None:
        """The job a live request runs as: its provisioner's noun for it, and its id."""
        return self._machine.job_of(provisioner, profile, request_id)

    def now(self) -> float:
        return self._clock.now()

    # -- events ---------------------------------------------------------------------------

    def want(self, provisioner: str, profile: str) -> None:
        """A queued call needs a machine of this profile (from the scheduler's plan)."""
        self._apply(self._machine.want(provisioner, profile, self._clock.now()))

    def wanted(self, profiles: frozenset[str]) -> None:
        """After a pass: the profiles some waiting call would use (a queued job of another
        is withdrawn a few seconds on)."""
        self._apply(self._machine.wanted(profiles, self._clock.now()))

    def recover(self, requests: list[MachineRequest]) -> None:
        """Requests an earlier run of the engine submitted: watched again where they left;
        and the profiles a person paused, paused still."""
        self._apply(self._machine.recover(requests, self._clock.now()))
        self._apply(self._machine.paused_before(self._engine.pauses()))
        self._apply(self._machine.site_before(self._engine.site_limits()))

    def pause(self, profile: str, by: str) -> None:
        """A person paused ``profile`` (``provisioner/profile``); unknown: ``NotFound``."""
        self._apply(self._machine.pause(profile, by))

    def resume(self, profile: str, by: str) -> None:
        self._apply(self._machine.resume(profile, by))

    def worker_attached(self, event: WorkerRecord) -> None:
        self._apply(self._machine.worker_attached(event, self._clock.now()))

    def worker_gone(self, event: WorkerRecord) -> None:
        self._apply(self._machine.worker_gone(event, self._clock.now()))

    async def close(self) -> None:
        """Cancel every request whose worker has not attached; close the provisioners."""
        self._closing = True
        self._apply(self._machine.closing())
        polls = set(self._polls.values())
        for poll in polls:
            poll.cancel()
        self._sites.stop()
        submitting = [t for t in self._tasks if t not in polls]
        if submitting:
            await asyncio.wait(submitting, timeout=SHUTDOWN_CANCEL_S)
        before = set(self._tasks)
        self._apply(self._machine.close())
        cancels = self._tasks - before
        if cancels:
            await asyncio.wait(cancels, timeout=SHUTDOWN_CANCEL_S)
        for provisioner in self._provisioners.values():
            with contextlib.suppress(Exception):
                await provisioner.close()

    # -- carrying effects out ---------------------------------------------------------------

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: Effect) -> None:
        # Every effect has its case: one without is a type error (assert_never).
        match effect:
            case Submit() | Cancel() | CleanUp() | StartPoll() | ReadSite():
                self._ask_backend(effect)
            case Remember() | RememberPause() | RememberSite() | Forget() | Revoke():
                self._write_down(effect)
            case Wake():
                self._wake(effect)
            case Unwake():
                self._unwake(effect)
            case Observe():
                self._observe(effect)
            case Log():
                getattr(log, effect.level)(effect.event, **effect.fields)
            case Changed():
                self._on_change()
            case _:
                assert_never(effect)

    def _write_down(self, effect: WriteDown) -> None:
        match effect:
            case Remember():
                self._record("remember", self._engine.remember, effect.request)
            case Forget():
                self._record("forget", self._engine.forget, effect.request_id)
            case RememberPause():
                self._record(
                    "remember_pause", self._engine.remember_pause, effect.profile, effect.said
                )
            case RememberSite():
                self._record(
                    "remember_site", self._engine.remember_site, effect.profile, effect.limit
                )
            case Revoke():
                self._record("revoke_token", self._engine.revoke_token, effect.jti, effect.reason)
            case _:
                assert_never(effect)

    def _ask_backend(self, effect: AskBackend) -> None:
        match effect:
            case Submit():
                self._spawn(self._submit(effect))
            case Cancel():
                self._spawn(self._cancel(effect))
            case CleanUp():
                self._spawn(self._clean_up(effect))
            case StartPoll():
                self._start_poll(effect)
            case ReadSite():
                self._sites.start(effect.provisioner)
            case _:
                assert_never(effect)

    async def _submit(self, effect: Submit) -> None:
        machine = self._machine
        rule = machine.rule(effect.profile)
        provisioner = self._provisioners[rule.provisioner]
        request = machine.request(effect.request_id)
        if request is None:
            return  # ended before anything was sent
        try:
            login = shared_login(provisioner) if effect.check_login else None
            if login is not None and await login.login_needed():
                now = self._clock.now()
                self._apply(machine.login_still_needed(effect.profile, request.id, now))
                return
            token, jti = self._engine.mint_token(provisioner.name, rule.profile, request.id)
            machine.minted(effect.profile, request.id, jti)
            # Written down first: an engine killed mid-submission looks for the job later.
            self._engine.remember(request)
            submitted = await provisioner.submit(rule.profile, request_id=request.id, token=token)
        except ProvisionError as exc:
            failed = machine.submit_failed(
                effect.profile,
                request.id,
                exc.detail,
                self._clock.now(),
                uncertain=exc.uncertain,
                login=exc.login_needed,
                unreachable=exc.unreachable,
            )
            self._apply(failed)
            return
        except Exception as exc:
            now = self._clock.now()
            self._apply(machine.submit_failed(effect.profile, request.id, _words(exc), now))
            return
        now = self._clock.now()
        self._apply(machine.submitted(effect.profile, request.id, submitted.job_id, now))

    async def _cancel(self, effect: Cancel) -> None:
        rule = self._machine.rule(effect.profile)
        provisioner = self._provisioners[rule.provisioner]
        message, job_id = effect.message, effect.job_id
        try:
            if effect.look_first:
                # A last look: a job found now is cancelled, not left to run unwatched.
                found = await provisioner.find([effect.request_id])
                job_id = found.get(effect.request_id)
            await provisioner.cancel(job_id, request_id=effect.request_id)
        except Exception as exc:
            message = f"{message} (cancelling it failed: {_words(exc)})"
        ended = self._machine.cancelled(
            effect.profile,
            effect.request_id,
            message,
            self._clock.now(),
            failed=effect.failed,
            job_id=job_id,
        )
        self._apply(ended)

    async def _clean_up(self, effect: CleanUp) -> None:
        provisioner = self._provisioners[effect.provisioner]
        try:
            await provisioner.cancel(effect.job_id, request_id=effect.request_id)
        except Exception as exc:
            log.warning("provision.cleanup_failed", request=effect.request_id, error=_words(exc))

    def _start_poll(self, effect: StartPoll) -> None:
        self._polls[effect.provisioner] = self._spawn(self._poll(effect.provisioner))

    async def _poll(self, name: str) -> None:
        """Look for lost submissions, then read the states of every job, in one call each."""
        machine = self._machine
        provisioner = self._provisioners[name]
        try:
            lost = machine.lost_requests(name)
            if lost:
                try:
                    found = await provisioner.find(lost)
                except Exception as exc:
                    self._apply(machine.found(name, lost, None, self._clock.now(), _words(exc)))
                else:
                    self._apply(machine.found(name, lost, found, self._clock.now()))
            job_ids = machine.jobs_to_poll(name)
            if job_ids:
                try:
                    statuses = await provisioner.poll(job_ids)
                except Exception as exc:
                    login = isinstance(exc, ProvisionError) and exc.login_needed
                    now = self._clock.now()
                    self._apply(machine.polled(name, job_ids, None, now, _words(exc), login=login))
                else:
                    self._apply(machine.polled(name, job_ids, statuses, self._clock.now()))
        finally:
            self._polls.pop(name, None)
            self._apply(machine.poll_ended(name, self._clock.now()))

    def _wake(self, effect: Wake) -> None:
        self._unwake(Unwake(effect.key))
        delay = effect.at - self._clock.now()
        self._timers[effect.key] = self._clock.call_later(delay, lambda: self._woke(effect.key))

    def _unwake(self, effect: Unwake) -> None:
        timer = self._timers.pop(effect.key, None)
        if timer is not None:
            timer.cancel()

    def _woke(self, key: str) -> None:
        self._timers.pop(key, None)
        self._apply(self._machine.woke(key, self._clock.now()))

    def _observe(self, effect: Observe) -> None:
        if effect.what == "submitted":
            self._emit(RequestSubmitted(effect.provisioner, effect.profile))
        elif effect.what == "failed":
            self._emit(RequestFailed(effect.provisioner, effect.profile))
        else:
            self._emit(RequestAttached(effect.provisioner, effect.profile, effect.seconds))

    def _command_ran(self, provisioner: str, program: str, seconds: float, reached: bool) -> None:
        self._emit(CommandRan(provisioner, program, seconds, reached))

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

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _words(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
