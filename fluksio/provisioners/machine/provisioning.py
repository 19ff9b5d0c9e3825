"""Provisioning as a pure state machine: what happened, with ``now``, in; what to do, out.

The rules (one request pending per profile, ``max_workers`` as a cap at every instant,
timeouts, backoff, login, lost answers, restarts) are in :mod:`fluksio.provisioners.driver`'s
docstring, and each lives here once. Every input is a method named for what happened (a
call wants a profile; a submission answered or failed; a poll or a search answered; a
cancel finished; a timer is due; a worker attached or left; an engine restarted or is
stopping) and returns the effects the driver carries out, in order:

- :class:`Submit`, :class:`Cancel`, :class:`CleanUp`: the provisioner's own methods, awaited
  by the driver, whose answers come back as inputs; :class:`StartPoll` a provisioner's
  requests (and look for lost submissions); :class:`ReadSite`, what the site allows
  (``site_read`` or ``site_unread`` answers, before a first submission);
- :class:`Remember`, :class:`Forget`, :class:`Revoke`: the engine's records and tokens;
- :class:`Wake` me at a time (a timeout, the end of a rest, the next poll), or
  :class:`Unwake`;
- :class:`Observe` (for the metrics), :class:`Log`, and :class:`Changed`: how a profile
  stands has changed (the scheduler reads it anew).

No clock, no I/O, no chance: ``now`` comes with each input and request ids from the
``new_id`` it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from fluksio.provisioners.base import TERMINAL_STATES, JobState, JobStatus, WorkerRecord
from fluksio.provisioners.machine.effects import (
    CleanUp,
    Effect,
    Log,
    Observe,
    ReadSite,
    Remember,
    StartPoll,
    Submit,
    Unwake,
    Wake,
)
from fluksio.provisioners.machine.endings import Endings
from fluksio.provisioners.machine.pause import Pausing
from fluksio.provisioners.machine.requests import (
    MachineRequest,
    ProfileRule,
    RequestStage,
    login_sentence,
)
from fluksio.provisioners.machine.site import SiteLimits
from fluksio.provisioners.machine.state import Brought, MachineState, as_scheduled
from fluksio.provisioners.machine.stop import StartAndStop

__all__ = ["POLL_SOON_S", "ProvisioningMachine"]

POLL_SOON_S = 1.0
"""After a worker of a request leaves, its job is polled this soon: its slot under
``max_workers`` is free once the job has ended, and a replacement may be waiting."""
_PENDING_STAGES = frozenset({RequestStage.SUBMITTING, RequestStage.QUEUED, RequestStage.STARTED})


class ProvisioningMachine:
    """Provisioning's rules: each input is what happened, each answer what to do. A shell
    that has its :class:`~.state.MachineState` and the parts given it: its start and stop
    (:class:`~.stop.StartAndStop`), pauses (:class:`~.pause.Pausing`) and site limits
    (:class:`~.site.SiteLimits`), whose inputs and the state's queries are its own."""

    def __init__(self, rules: Iterable[ProfileRule], new_id: Callable[[], str]) -> None:
        self._state = state = MachineState(rules, new_id)
        self._stops = stops = StartAndStop(state)
        self._pausing = pausing = Pausing(state)
        sites = SiteLimits(state)
        self._endings = Endings(state, pausing)
        self.recover, self.closing, self.close = stops.recover, stops.closing, stops.close
        self.wanted = stops.wanted
        self.pause, self.resume, self.paused_before = (
            pausing.pause, pausing.resume, pausing.paused_before
        )  # fmt: skip
        self.site_read, self.site_unread = sites.site_read, sites.site_unread
        self.site_before = sites.site_before
        self.rule, self.request, self.job_of = state.rule, state.request, state.job_of
        self.lost_requests, self.jobs_to_poll = state.lost_requests, state.jobs_to_poll
        self.scheduler_profiles, self.profiles = state.scheduler_profiles, state.profiles

    # -- inputs: asked for capacity, and the submission's answers ------------------------

    def want(self, provisioner: str, profile: str, now: float) -> list[Effect]:
        """A queued call needs a machine of this profile (from the scheduler's plan).

        Asked for only while none is pending, the profile does not rest, and fewer than
        its ``max_workers`` jobs are alive.
        """
        entry = self._state.entries.get(f"{provisioner}/{profile}")
        # The rule is the scheduler's own (Profile.can_grow), read here on the same data.
        if entry is None or self._state.is_closing or not as_scheduled(entry).can_grow:
            return []
        if provisioner not in self._state.sites_read:
            # What the site allows is read first: the next pass after it asks again.
            entry.reading_site = True
            return [ReadSite(provisioner), *self._state.changed()]
        request = MachineRequest(
            id=self._state.new_id(), provisioner=provisioner, profile=profile, created_at=now
        )
        entry.outstanding = request
        entry.live[request.id] = request
        check_login = entry.login_needed is not None
        return [Submit(entry.rule.key, request.id, check_login), *self._state.changed()]

    def minted(self, profile: str, request_id: str, jti: str) -> None:
        """The request's worker token was minted (before anything was sent)."""
        request = self._state.entries[profile].live.get(request_id)
        if request is not None:
            request.token_jti = jti

    def login_still_needed(self, profile: str, request_id: str, now: float) -> list[Effect]:
        """Nothing was sent: the login the profile waits for has not happened."""
        entry = self._state.entries[profile]
        effects: list[Effect] = []
        request = entry.live.get(request_id)
        if request is not None:
            self._endings.wait_for_login(entry, request, "still no login", now, effects)
        return effects

    def submitted(self, profile: str, request_id: str, job_id: str, now: float) -> list[Effect]:
        """The outside system took the submission: ``job_id`` is its job."""
        entry = self._state.entries[profile]
        entry.login_needed = None
        entry.failed_submissions = 0  # the site takes this profile's jobs
        request = entry.live.get(request_id)
        if request is None:
            # Given up on (timed out) before the answer came: its job must not run unwatched.
            return [CleanUp(entry.rule.provisioner, request_id, job_id)]
        request.job_id = job_id
        request.status_since = now
        effects: list[Effect] = []
        if request.stage is RequestStage.SUBMITTING:
            request.stage = RequestStage.QUEUED
            self._state.arm_timeout(entry, request, effects)
        # (else its worker was quicker than the submission's answer, and attached already)
        effects += [
            Remember(request),
            Log(
                "info",
                "provision.submitted",
                {"profile": profile, "request": request_id, "job": job_id},
            ),
            Observe("submitted", entry.rule.provisioner, entry.rule.profile.name),
        ]
        self._state.ensure_poll(entry.rule.provisioner, now, effects)
        effects += self._state.changed()
        if self._state.is_closing:
            self._stops.withdraw(entry, request, effects)
        return effects

    def submit_failed(
        self,
        profile: str,
        request_id: str,
        detail: str,
        now: float,
        *,
        uncertain: bool = False,
        login: bool = False,
        unreachable: bool = False,
    ) -> list[Effect]:
        """The submission failed: refused, needing a login, (``uncertain``) its answer
        lost and it may have queued a job, or (``unreachable``) the site never saw it."""
        entry = self._state.entries[profile]
        request = entry.live.get(request_id)
        effects: list[Effect] = []
        if request is None:
            return effects  # already ended (timed out): that counted already
        if login:
            self._endings.wait_for_login(entry, request, detail, now, effects)
        elif uncertain:
            request.answer_lost = detail
            if request.stage is RequestStage.SUBMITTING:
                self._state.arm_timeout(entry, request, effects)
            fields = {"profile": profile, "request": request_id, "error": detail}
            effects.append(Log("warning", "provision.answer_lost", fields))
            self._state.ensure_poll(entry.rule.provisioner, now, effects)
            effects += self._state.changed()
        else:
            self._endings.failed(entry, request, detail, now, effects, counted=not unreachable)
        return effects

    # -- inputs: polls and searches -------------------------------------------------------

    def found(
        self,
        provisioner: str,
        request_ids: Iterable[str],
        jobs: Mapping[str, str] | None,
        now: float,
        error: str | None = None,
    ) -> list[Effect]:
        """What a search for lost submissions found (``jobs``: request id -> job id), or
        why it failed (``error``): adopted if found, submitted again if not."""
        effects: list[Effect] = []
        lost = [self._state.live(provisioner, rid) for rid in request_ids]
        if jobs is None:
            for entry, _request in filter(None, lost):  # looked for again at the next poll
                entry.last_error = (now, f"looking for a job failed: {error}")
            return self._state.changed()
        for entry, request in filter(None, lost):
            if request.job_id is not None:
                continue
            job_id = jobs.get(request.id)
            if job_id is not None:
                request.job_id, request.answer_lost = job_id, None
                request.status_since = now
                if request.stage is RequestStage.SUBMITTING:
                    request.stage = RequestStage.QUEUED
                fields = {"profile": entry.rule.key, "request": request.id, "job": job_id}
                effects += [Remember(request), Log("info", "provision.found", fields)]
            elif request.stage is not RequestStage.ATTACHED:
                noun = entry.rule.job_noun
                message = f"{request.answer_lost}; no {noun} of it was found, submitting again"
                request.answer_lost = None  # looked for: the cancel only cleans up
                self._state.cancel(entry, request, message, effects, failed=True)
        return effects

    def polled(
        self,
        provisioner: str,
        job_ids: Iterable[str],
        statuses: Mapping[str, JobStatus] | None,
        now: float,
        error: str | None = None,
        *,
        login: bool = False,
    ) -> list[Effect]:
        """The states of the provisioner's jobs (``statuses``; a job missing left the
        queue), or why reading them failed (``error``; ``login`` when a person must log in)."""
        polled = set(job_ids)
        watched = [
            (entry, request)
            for entry in self._state.of(provisioner)
            for request in list(entry.live.values())
            if request.job_id in polled
        ]
        effects: list[Effect] = []
        if statuses is None:
            for entry, request in watched:
                if login:
                    entry.login_needed = login_sentence(provisioner)
                if request.stage is not RequestStage.ATTACHED:
                    entry.last_error = (now, f"polling failed: {error}")
            return self._state.changed()
        for entry, request in watched:
            entry.login_needed = None
            status = statuses.get(str(request.job_id))
            if status is None or status.state in TERMINAL_STATES:
                self._endings.job_ended(entry, request, status, now, effects)
                continue
            if request.status != status:
                request.status = status
                request.status_since = now
            if status.state is JobState.RUNNING and request.stage is RequestStage.QUEUED:
                request.stage = RequestStage.STARTED
        effects += self._state.changed()
        return effects

    def poll_ended(self, provisioner: str, now: float) -> list[Effect]:
        """A poll finished (however it went): the next is due at the interval."""
        self._state.pollers[provisioner].polling = False
        effects: list[Effect] = []
        if self.lost_requests(provisioner) or self.jobs_to_poll(provisioner):
            self._state.ensure_poll(provisioner, now, effects)
        return effects

    def cancelled(
        self,
        profile: str,
        request_id: str,
        message: str,
        now: float,
        *,
        failed: bool,
        job_id: str | None,
    ) -> list[Effect]:
        """A cancel the machine asked for finished (``message`` says how)."""
        self._state.cancelling.discard(request_id)
        entry = self._state.entries[profile]
        request = entry.live.get(request_id)
        effects: list[Effect] = []
        if request is None:
            return effects  # it ended meanwhile, and that was counted then
        if request.job_id is None:
            request.job_id = job_id  # found by the last look
        if failed:
            self._endings.failed(entry, request, message, now, effects)
        else:
            self._endings.ended(entry, request, message, effects)
        return effects

    def woke(self, key: str, now: float) -> list[Effect]:
        """A wake the machine asked for is due."""
        kind, _, name = key.partition(":")
        effects: list[Effect] = []
        if kind == "rest":
            entry = self._state.entries[name]
            # Not a submission: the next scheduling pass asks again if a call still needs it.
            entry.resting_until = None
            effects += self._state.changed()
        elif kind == "poll":
            poller = self._state.pollers[name]
            poller.due_at = None
            watched = self.lost_requests(name) or self.jobs_to_poll(name)
            if watched and not self._state.is_closing and not poller.polling:
                poller.polling = True
                effects.append(StartPoll(name))
        elif kind == "unwanted":
            self._stops.unwanted_due(name, effects)
        elif kind == "timeout":
            found = self._state.find(name)
            if found is not None and found[1].stage in _PENDING_STAGES:
                entry, request = found
                timeout = entry.rule.settings.provision_timeout_s
                noun = entry.rule.job_noun
                job = f"{noun} {request.job_id}" if request.job_id else f"the {noun}"
                message = f"{job} did not attach within {timeout:g} s; cancelled"
                self._state.cancel(entry, request, message, effects, failed=True)
        return effects

    # -- inputs: workers -----------------------------------------------------------------

    def worker_attached(self, event: WorkerRecord, now: float) -> list[Effect]:
        entry = self._state.entry_of(event)
        if entry is None:
            return []
        request = entry.live.get(str(event.request_id))
        entry.workers[event.worker_id] = Brought(event.name, now, request, event.job_id)
        if request is None:
            return []  # a request of an earlier engine run: welcome, nothing to fulfil
        request.stage = RequestStage.ATTACHED
        request.attached_at = now
        rule = entry.rule
        effects: list[Effect] = [
            Observe("attached", rule.provisioner, rule.profile.name, now - request.created_at),
            Remember(request),
            Unwake(f"timeout:{request.id}"),
        ]
        if entry.outstanding is request:
            entry.outstanding = None
        entry.last_error = None
        entry.failures = entry.failed_starts = 0
        effects += self._state.changed()
        return effects

    def worker_gone(self, event: WorkerRecord, now: float) -> list[Effect]:
        entry = self._state.entry_of(event)
        if entry is None:
            return []
        brought = entry.workers.pop(event.worker_id, None)
        effects: list[Effect] = []
        if brought is not None and brought.request is not None:
            # Its job is likely ending (drained, idle, or the job itself ended): its slot
            # is free once the provisioner says so, so ask soon rather than at the
            # interval, lest a replacement wait for nothing.
            poller = self._state.pollers[entry.rule.provisioner]
            if not self._state.is_closing and not poller.polling:
                poller.due_at = now + min(POLL_SOON_S, poller.interval_s)
                effects.append(Wake(f"poll:{entry.rule.provisioner}", poller.due_at))
        return effects
