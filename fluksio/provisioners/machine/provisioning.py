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

from collections.abc import Iterable, Mapping

from fluksio.provisioners.base import TERMINAL_STATES, JobState, JobStatus, WorkerRecord
from fluksio.provisioners.machine.effects import (
    CleanUp,
    Effect,
    Forget,
    Log,
    Observe,
    ReadSite,
    Remember,
    Revoke,
    StartPoll,
    Submit,
    Unwake,
    Wake,
)
from fluksio.provisioners.machine.pause import Pausing
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage, login_sentence
from fluksio.provisioners.machine.site import SiteLimits
from fluksio.provisioners.machine.state import Brought, ProfileEntry, as_scheduled
from fluksio.provisioners.machine.stop import StartAndStop

__all__ = ["POLL_SOON_S", "ProvisioningMachine"]

POLL_SOON_S = 1.0
"""After a worker of a request leaves, its job is polled this soon: its slot under
``max_workers`` is free once the job has ended, and a replacement may be waiting."""
_PENDING_STAGES = frozenset({RequestStage.SUBMITTING, RequestStage.QUEUED, RequestStage.STARTED})


class ProvisioningMachine(StartAndStop, Pausing, SiteLimits):
    """Provisioning's rules: each input is what happened, each answer what to do."""

    # -- inputs: asked for capacity, and the submission's answers ------------------------

    def want(self, provisioner: str, profile: str, now: float) -> list[Effect]:
        """A queued call needs a machine of this profile (from the scheduler's plan).

        Asked for only while none is pending, the profile does not rest, and fewer than
        its ``max_workers`` jobs are alive.
        """
        entry = self._profiles.get(f"{provisioner}/{profile}")
        # The rule is the scheduler's own (Profile.can_grow), read here on the same data.
        if entry is None or self._closing or not as_scheduled(entry).can_grow:
            return []
        if provisioner not in self._sites_read:
            # What the site allows is read first: the next pass after it asks again.
            entry.reading_site = True
            return [ReadSite(provisioner), *self._changed()]
        request = MachineRequest(
            id=self._new_id(), provisioner=provisioner, profile=profile, created_at=now
        )
        entry.outstanding = request
        entry.live[request.id] = request
        check_login = entry.login_needed is not None
        return [Submit(entry.rule.key, request.id, check_login), *self._changed()]

    def minted(self, profile: str, request_id: str, jti: str) -> None:
        """The request's worker token was minted (before anything was sent)."""
        request = self._profiles[profile].live.get(request_id)
        if request is not None:
            request.token_jti = jti

    def login_still_needed(self, profile: str, request_id: str, now: float) -> list[Effect]:
        """Nothing was sent: the login the profile waits for has not happened."""
        entry = self._profiles[profile]
        effects: list[Effect] = []
        request = entry.live.get(request_id)
        if request is not None:
            self._wait_for_login(entry, request, "still no login", now, effects)
        return effects

    def submitted(self, profile: str, request_id: str, job_id: str, now: float) -> list[Effect]:
        """The outside system took the submission: ``job_id`` is its job."""
        entry = self._profiles[profile]
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
            self._arm_timeout(entry, request, effects)
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
        self._ensure_poll(entry.rule.provisioner, now, effects)
        effects += self._changed()
        if self._closing:
            self._withdraw(entry, request, effects)
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
        entry = self._profiles[profile]
        request = entry.live.get(request_id)
        effects: list[Effect] = []
        if request is None:
            return effects  # already ended (timed out): that counted already
        if login:
            self._wait_for_login(entry, request, detail, now, effects)
        elif uncertain:
            request.answer_lost = detail
            if request.stage is RequestStage.SUBMITTING:
                self._arm_timeout(entry, request, effects)
            fields = {"profile": profile, "request": request_id, "error": detail}
            effects.append(Log("warning", "provision.answer_lost", fields))
            self._ensure_poll(entry.rule.provisioner, now, effects)
            effects += self._changed()
        else:
            self._failed(entry, request, detail, now, effects, counted=not unreachable)
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
        lost = [self._live(provisioner, rid) for rid in request_ids]
        if jobs is None:
            for entry, _request in filter(None, lost):  # looked for again at the next poll
                entry.last_error = (now, f"looking for a job failed: {error}")
            return self._changed()
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
                self._cancel(entry, request, message, effects, failed=True)
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
            for entry in self._of(provisioner)
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
            return self._changed()
        for entry, request in watched:
            entry.login_needed = None
            status = statuses.get(str(request.job_id))
            if status is None or status.state in TERMINAL_STATES:
                self._job_ended(entry, request, status, now, effects)
                continue
            if request.status != status:
                request.status = status
                request.status_since = now
            if status.state is JobState.RUNNING and request.stage is RequestStage.QUEUED:
                request.stage = RequestStage.STARTED
        effects += self._changed()
        return effects

    def poll_ended(self, provisioner: str, now: float) -> list[Effect]:
        """A poll finished (however it went): the next is due at the interval."""
        self._pollers[provisioner].polling = False
        effects: list[Effect] = []
        if self.lost_requests(provisioner) or self.jobs_to_poll(provisioner):
            self._ensure_poll(provisioner, now, effects)
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
        self._cancelling.discard(request_id)
        entry = self._profiles[profile]
        request = entry.live.get(request_id)
        effects: list[Effect] = []
        if request is None:
            return effects  # it ended meanwhile, and that was counted then
        if request.job_id is None:
            request.job_id = job_id  # found by the last look
        if failed:
            self._failed(entry, request, message, now, effects)
        else:
            self._ended(entry, request, message, effects)
        return effects

    def woke(self, key: str, now: float) -> list[Effect]:
        """A wake the machine asked for is due."""
        kind, _, name = key.partition(":")
        effects: list[Effect] = []
        if kind == "rest":
            entry = self._profiles[name]
            # Not a submission: the next scheduling pass asks again if a call still needs it.
            entry.resting_until = None
            effects += self._changed()
        elif kind == "poll":
            poller = self._pollers[name]
            poller.due_at = None
            watched = self.lost_requests(name) or self.jobs_to_poll(name)
            if watched and not self._closing and not poller.polling:
                poller.polling = True
                effects.append(StartPoll(name))
        elif kind == "unwanted":
            self._unwanted_due(name, effects)
        elif kind == "timeout":
            found = self._find(name)
            if found is not None and found[1].stage in _PENDING_STAGES:
                entry, request = found
                timeout = entry.rule.settings.provision_timeout_s
                noun = entry.rule.job_noun
                job = f"{noun} {request.job_id}" if request.job_id else f"the {noun}"
                message = f"{job} did not attach within {timeout:g} s; cancelled"
                self._cancel(entry, request, message, effects, failed=True)
        return effects

    # -- inputs: workers -----------------------------------------------------------------

    def worker_attached(self, event: WorkerRecord, now: float) -> list[Effect]:
        entry = self._entry_of(event)
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
        effects += self._changed()
        return effects

    def worker_gone(self, event: WorkerRecord, now: float) -> list[Effect]:
        entry = self._entry_of(event)
        if entry is None:
            return []
        brought = entry.workers.pop(event.worker_id, None)
        effects: list[Effect] = []
        if brought is not None and brought.request is not None:
            # Its job is likely ending (drained, idle, or the job itself ended): its slot
            # is free once the provisioner says so, so ask soon rather than at the
            # interval, lest a replacement wait for nothing.
            poller = self._pollers[entry.rule.provisioner]
            if not self._closing and not poller.polling:
                poller.due_at = now + min(POLL_SOON_S, poller.interval_s)
                effects.append(Wake(f"poll:{entry.rule.provisioner}", poller.due_at))
        return effects

    # -- the rules -----------------------------------------------------------------------

    def _failed(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        message: str,
        now: float,
        effects: list[Effect],
        *,
        counted: bool = True,
    ) -> None:
        """A request that did not bring a worker: record why, rest, then ask again (unless
        that made the profile pause itself: ``counted`` toward its failures in a row)."""
        self._ended(entry, request, message, effects)
        if counted:
            self._count_failure(entry, request, message, effects)
        rule = entry.rule
        effects.append(Observe("failed", rule.provisioner, rule.profile.name))
        entry.last_error = (now, message)
        entry.failures += 1
        settings = rule.settings
        rest = min(settings.retry_max_s, settings.retry_base_s * 2 ** (entry.failures - 1))
        fields = {"profile": rule.key, "error": message, "retry_in_s": rest}
        effects.append(Log("warning", "provision.failed", fields))
        self._rest(entry, rest, now, effects)

    def _wait_for_login(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        detail: str,
        now: float,
        effects: list[Effect],
    ) -> None:
        """Nothing was sent: a person must log in. Not a failure (no backoff grows); the
        profile is looked at again after one poll interval, locally, until they have."""
        if entry.login_needed is None:
            fields = {"profile": entry.rule.key, "detail": detail}
            effects.append(Log("warning", "provision.login_needed", fields))
        entry.login_needed = login_sentence(entry.rule.provisioner)
        if request.token_jti is not None:
            self._ended(entry, request, entry.login_needed, effects)  # its token is revoked
        else:  # minted nothing, wrote nothing, reached nothing: no trace to leave
            entry.live.pop(request.id, None)
            if entry.outstanding is request:
                entry.outstanding = None
            request.stage = RequestStage.ENDED
        self._rest(entry, entry.rule.settings.poll_interval_s, now, effects)

    def _rest(self, entry: ProfileEntry, seconds: float, now: float, effects: list[Effect]) -> None:
        """The profile is not asked for again for ``seconds``; then the next pass may."""
        entry.resting_until = now + seconds
        if not self._closing:
            effects.append(Wake(f"rest:{entry.rule.key}", entry.resting_until))
        effects += self._changed()

    def _ended(
        self, entry: ProfileEntry, request: MachineRequest, outcome: str, effects: list[Effect]
    ) -> None:
        if request.stage is RequestStage.ENDED:
            return
        request.stage = RequestStage.ENDED
        effects.append(Unwake(f"timeout:{request.id}"))
        entry.live.pop(request.id, None)
        if entry.outstanding is request:
            entry.outstanding = None
        if request.token_jti is not None:
            effects.append(Revoke(request.token_jti, outcome))
        fields = {
            "profile": entry.rule.key,
            "request": request.id,
            "job": request.job_id,
            "outcome": outcome,
        }
        effects += [Forget(request.id), Log("info", "provision.ended", fields), *self._changed()]

    def _job_ended(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        status: JobStatus | None,
        now: float,
        effects: list[Effect],
    ) -> None:
        how = f"ended {status.describe()}" if status is not None else "left the queue"
        what = f"{entry.rule.job_noun} {request.job_id} {how}"
        if request.stage is RequestStage.ATTACHED:
            self._ended(entry, request, what, effects)
        elif request.withdrawn:
            self._ended(entry, request, f"{what}, withdrawn as the engine stopped", effects)
            effects.append(CleanUp(entry.rule.provisioner, request.id, request.job_id))
        else:
            self._failed(entry, request, f"{what} before its worker attached", now, effects)
            # Ended before its worker read what the submission left for it (a token file).
            effects.append(CleanUp(entry.rule.provisioner, request.id, request.job_id))
