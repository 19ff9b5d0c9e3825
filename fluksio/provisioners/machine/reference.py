"""The provisioning rules as a naive ledger: every fact derived by scanning all requests.

This is the specification of :class:`~.machine.ProvisioningMachine` in executable form. It
keeps one flat ledger of requests and, per profile, only its failures (all, and in a row
by kind), rest, pause and login; it
has no outstanding pointer, no live map and no timers of its own. Which request is
pending, how many jobs are alive, whether a profile may be asked for: each is a scan of
the ledger when it is needed. The property tests (``tests/test_provisioning_machine.py``)
give both the same inputs and require the same requests, stages, rests and decisions.

Its decisions, as tuples in :attr:`ReferenceProvisioning.decisions`: ``("submit", id)``,
``("cancel", id, failed)``, ``("cleanup", id)``, ``("revoke", jti)``, ``("forget", id)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobState,
    JobStatus,
    SiteLimit,
    WorkerRecord,
)
from fluksio.provisioners.machine.requests import MachineRequest, ProfileRule, RequestStage

UNWANTED_GRACE_S = 5.0
"""Restated, not imported: how long a queued job nothing waits for is kept."""

__all__ = ["ReferenceProvisioning", "ReferenceRequest"]

_PENDING = (RequestStage.SUBMITTING, RequestStage.QUEUED, RequestStage.STARTED)


@dataclass
class ReferenceRequest:
    id: str
    profile: str
    created_at: float
    stage: RequestStage = RequestStage.SUBMITTING
    job_id: str | None = None
    jti: str | None = None
    answer_lost: str | None = None
    cancel_sent: bool = False
    withdrawn: bool = False


class ReferenceProvisioning:
    def __init__(self, rules: Iterable[ProfileRule], new_id: Callable[[], str]) -> None:
        self.rules = {rule.key: rule for rule in rules}
        self.new_id = new_id
        self.ledger: dict[str, ReferenceRequest] = {}
        self.failures = dict.fromkeys(self.rules, 0)
        self.rest_until: dict[str, float | None] = dict.fromkeys(self.rules)
        self.login = dict.fromkeys(self.rules, False)
        self.last_error: dict[str, str | None] = dict.fromkeys(self.rules)
        self.failed_submissions = dict.fromkeys(self.rules, 0)
        self.failed_starts = dict.fromkeys(self.rules, 0)
        self.paused = dict.fromkeys(self.rules, False)
        self.paused_by_hand: set[str] = set()
        self.site: dict[str, SiteLimit] = {key: SiteLimit() for key in self.rules}
        self.site_known = {rule.provisioner for rule in self.rules.values() if not rule.reads_site}
        self.reading_site: set[str] = set()
        self.site_read_once: set[str] = set()
        self.closing = False
        self.decisions: list[tuple[object, ...]] = []
        self.unwanted_since: dict[str, float] = {}
        """Queued requests no waiting call would use, since when."""

    # -- what is derived ---------------------------------------------------------------------

    def alive(self, profile: str) -> list[ReferenceRequest]:
        return [
            r
            for r in self.ledger.values()
            if r.profile == profile and r.stage is not RequestStage.ENDED
        ]

    def pending(self, profile: str) -> list[ReferenceRequest]:
        return [r for r in self.alive(profile) if r.stage in _PENDING]

    def _request(self, request_id: str) -> ReferenceRequest | None:
        request = self.ledger.get(request_id)
        return request if request is not None and request.stage is not RequestStage.ENDED else None

    # -- inputs, as the machine's ------------------------------------------------------------

    def want(self, provisioner: str, profile: str, now: float) -> None:
        key = f"{provisioner}/{profile}"
        rule = self.rules.get(key)
        if rule is None or self.closing or self.pending(key) or self.rest_until[key] is not None:
            return
        if self.paused[key] or self.site[key].refused is not None:
            return
        unread = rule.reads_site and key not in self.site_read_once
        most = [rule.profile.max_workers, self.site[key].most_jobs, 1 if unread else None]
        if len(self.alive(key)) >= min(n for n in most if n is not None):
            return
        if key in self.reading_site:
            return
        if provisioner not in self.site_known:
            self.reading_site.add(key)
            return
        request = ReferenceRequest(self.new_id(), key, now)
        self.ledger[request.id] = request
        self.decisions.append(("submit", request.id))

    def site_read(self, provisioner: str, limits: Mapping[str, SiteLimit]) -> None:
        self.site_unread(provisioner)
        for key, rule in self.rules.items():
            if rule.provisioner == provisioner:
                self.site[key] = limits.get(rule.profile.name, SiteLimit())
                self.site_read_once.add(key)

    def site_before(self, limits: Mapping[str, SiteLimit]) -> None:
        for key, limit in limits.items():
            if key in self.rules:
                self.site[key] = limit
                self.site_read_once.add(key)

    def site_unread(self, provisioner: str) -> None:
        self.site_known.add(provisioner)
        self.reading_site -= {k for k, r in self.rules.items() if r.provisioner == provisioner}

    def minted(self, profile: str, request_id: str, jti: str) -> None:
        request = self._request(request_id)
        if request is not None:
            request.jti = jti

    def login_still_needed(self, profile: str, request_id: str, now: float) -> None:
        request = self._request(request_id)
        if request is not None:
            self._needs_login(request, now)

    def submitted(self, profile: str, request_id: str, job_id: str, now: float) -> None:
        self.login[profile] = False
        self.failed_submissions[profile] = 0
        request = self._request(request_id)
        if request is None:
            self.decisions.append(("cleanup", request_id))
            return
        request.job_id = job_id
        if request.stage is RequestStage.SUBMITTING:
            request.stage = RequestStage.QUEUED
        if self.closing:
            self._cancel(request, failed=False)

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
    ) -> None:
        request = self._request(request_id)
        if request is None:
            return
        if login:
            self._needs_login(request, now)
        elif uncertain:
            request.answer_lost = detail
        else:
            self._fail(request, detail, now, counted=not unreachable)

    def found(
        self,
        provisioner: str,
        request_ids: Iterable[str],
        jobs: Mapping[str, str] | None,
        now: float,
        error: str | None = None,
    ) -> None:
        for request_id in request_ids:
            request = self._request(request_id)
            if request is None or self.rules[request.profile].provisioner != provisioner:
                continue
            if jobs is None:
                self.last_error[request.profile] = f"looking for a job failed: {error}"
            elif request.job_id is not None:
                continue
            elif request_id in jobs:
                request.job_id, request.answer_lost = jobs[request_id], None
                if request.stage is RequestStage.SUBMITTING:
                    request.stage = RequestStage.QUEUED
            elif request.stage is not RequestStage.ATTACHED:
                request.answer_lost = None
                self._cancel(request, failed=True)

    def polled(
        self,
        provisioner: str,
        job_ids: Iterable[str],
        statuses: Mapping[str, JobStatus] | None,
        now: float,
        error: str | None = None,
        *,
        login: bool = False,
    ) -> None:
        polled = set(job_ids)
        for request in list(self.ledger.values()):
            rule = self.rules[request.profile]
            if rule.provisioner != provisioner or request.stage is RequestStage.ENDED:
                continue
            if request.job_id not in polled:
                continue
            if statuses is None:
                if login:
                    self.login[request.profile] = True
                if request.stage is not RequestStage.ATTACHED:
                    self.last_error[request.profile] = f"polling failed: {error}"
                continue
            self.login[request.profile] = False
            self._job_read(request, rule.job_noun, statuses.get(str(request.job_id)), now)

    def _job_read(
        self, request: ReferenceRequest, job_noun: str, status: JobStatus | None, now: float
    ) -> None:
        """What a poll read of one request's job (None: not in the queue any more)."""
        if status is None or status.state in TERMINAL_STATES:
            how = f"ended {status.describe()}" if status is not None else "left the queue"
            what = f"{job_noun} {request.job_id} {how}"
            if request.stage is RequestStage.ATTACHED:
                self._end(request)
            elif request.withdrawn:  # the engine cancelled it: no failed start
                self._end(request)
                self.decisions.append(("cleanup", request.id))
            else:
                self._fail(request, f"{what} before its worker attached", now)
                self.decisions.append(("cleanup", request.id))
        elif status.state is JobState.RUNNING and request.stage is RequestStage.QUEUED:
            request.stage = RequestStage.STARTED

    def cancelled(
        self,
        profile: str,
        request_id: str,
        message: str,
        now: float,
        *,
        failed: bool,
        job_id: str | None,
    ) -> None:
        request = self.ledger.get(request_id)
        if request is not None:
            request.cancel_sent = False
        request = self._request(request_id)
        if request is None:
            return
        if request.job_id is None:
            request.job_id = job_id
        if failed:
            self._fail(request, message, now)
        else:
            self._end(request)

    def wanted(self, profiles: frozenset[str], now: float) -> None:
        for request in self.ledger.values():
            if request.stage is not RequestStage.QUEUED or request.withdrawn:
                continue
            if request.profile in profiles:
                self.unwanted_since.pop(request.id, None)
            else:
                self.unwanted_since.setdefault(request.id, now)

    def woke(self, key: str, now: float) -> None:
        kind, _, name = key.partition(":")
        if kind == "unwanted":
            since = self.unwanted_since.pop(name, None)
            request = self._request(name)
            if (
                since is not None
                and now >= since + UNWANTED_GRACE_S
                and request is not None
                and request.stage is RequestStage.QUEUED
                and not self.closing
            ):
                request.withdrawn = True
                self._cancel(request, failed=False)
        elif kind == "rest":
            self.rest_until[name] = None
        elif kind == "timeout":
            request = self._request(name)
            if request is not None and request.stage in _PENDING:
                self._cancel(request, failed=True)

    def worker_attached(self, event: WorkerRecord, now: float) -> None:
        key = f"{event.provisioner}/{event.profile}"
        request = self._request(str(event.request_id))
        if key not in self.rules or request is None or request.profile != key:
            return
        request.stage = RequestStage.ATTACHED
        self.last_error[key] = None
        self.failures[key] = 0
        self.failed_starts[key] = 0

    def pause(self, profile: str, by: str) -> None:
        self.paused[profile] = True
        self.paused_by_hand.add(profile)

    def resume(self, profile: str, by: str) -> None:
        self.paused[profile] = False
        self.paused_by_hand.discard(profile)
        self.failures[profile] = self.failed_submissions[profile] = 0
        self.failed_starts[profile] = 0
        self.rest_until[profile] = None

    def paused_before(self, pauses: Mapping[str, str]) -> None:
        for profile in pauses:
            if profile in self.rules:
                self.paused[profile] = True
                self.paused_by_hand.add(profile)

    def recover(self, requests: Iterable[MachineRequest], now: float) -> None:
        for stored in requests:
            key = f"{stored.provisioner}/{stored.profile}"
            if key not in self.rules:
                if stored.token_jti is not None:
                    self.decisions.append(("revoke", stored.token_jti))
                self.decisions.append(("forget", stored.id))
                continue
            request = ReferenceRequest(
                stored.id, key, stored.created_at, stored.stage, stored.job_id, stored.token_jti
            )
            request.withdrawn = stored.withdrawn
            if request.job_id is None:
                request.answer_lost = "the engine stopped before the submission answered"
            self.ledger[request.id] = request
            if request.withdrawn and request.stage is not RequestStage.ATTACHED:
                self._cancel(request, failed=False)  # the cancel the last engine began

    def closing_down(self) -> None:
        self.closing = True

    def close(self) -> None:
        for request in list(self.ledger.values()):
            if (
                request.stage is not RequestStage.ENDED
                and request.stage is not RequestStage.ATTACHED
            ):
                request.withdrawn = True
                self._cancel(request, failed=False)

    # -- the rules ---------------------------------------------------------------------------

    def _cancel(self, request: ReferenceRequest, *, failed: bool) -> None:
        if not request.cancel_sent:
            request.cancel_sent = True
            self.decisions.append(("cancel", request.id, failed))

    def _end(self, request: ReferenceRequest) -> None:
        if request.stage is RequestStage.ENDED:
            return
        request.stage = RequestStage.ENDED
        if request.jti is not None:
            self.decisions.append(("revoke", request.jti))
        self.decisions.append(("forget", request.id))

    def _fail(
        self, request: ReferenceRequest, message: str, now: float, *, counted: bool = True
    ) -> None:
        self._end(request)
        key = request.profile
        self.last_error[key] = message
        self.failures[key] += 1
        settings = self.rules[key].settings
        if counted:  # a submission the site never saw is not the site's refusal
            # Without a job the site refused it; with one, its job never brought a worker.
            refused = request.job_id is None
            in_a_row = self.failed_submissions if refused else self.failed_starts
            in_a_row[key] += 1
            limit = (
                settings.pause_after_failed_submissions
                if refused
                else settings.pause_after_failed_starts
            )
            if limit and in_a_row[key] >= limit:
                self.paused[key] = True
        rest = min(settings.retry_max_s, settings.retry_base_s * 2 ** (self.failures[key] - 1))
        self._rest(key, rest, now)

    def _needs_login(self, request: ReferenceRequest, now: float) -> None:
        self.login[request.profile] = True
        if request.jti is not None:
            self._end(request)
        else:
            request.stage = RequestStage.ENDED  # nothing was minted, written or sent
        self._rest(request.profile, self.rules[request.profile].settings.poll_interval_s, now)

    def _rest(self, profile: str, seconds: float, now: float) -> None:
        self.rest_until[profile] = now + seconds
