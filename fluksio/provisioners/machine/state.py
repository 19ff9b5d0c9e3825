"""What the provisioning machine holds, and what it answers about it: each profile's
requests, workers, errors and rest; the pollers; the views the scheduler and the API read.
No input is taken here; only the small steps every rule takes (arm a timeout, a poll, a
cancel) are."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from fluksio.provisioners.base import SiteLimit, WorkerRecord, fitted_notice
from fluksio.provisioners.machine.effects import Cancel, Changed, Effect, Wake
from fluksio.provisioners.machine.requests import (
    BroughtWorker,
    MachineRequest,
    ProfileRule,
    ProfileStatus,
    RequestStage,
)
from fluksio.scheduler import Containers, Profile, Provisioning, cap_reached

__all__ = ["Brought", "MachineState", "Poller", "ProfileEntry", "as_scheduled"]


@dataclass
class Brought:
    name: str
    attached_at: float
    request: MachineRequest | None
    """None for a worker whose request an earlier engine run made and this one never saw."""
    reported_job_id: str | None


@dataclass
class ProfileEntry:
    rule: ProfileRule
    outstanding: MachineRequest | None = None
    live: dict[str, MachineRequest] = field(default_factory=dict)
    last_error: tuple[float, str] | None = None
    failures: int = 0
    resting_until: float | None = None
    workers: dict[str, Brought] = field(default_factory=dict)
    login_needed: str | None = None
    paused: str | None = None
    """Why nothing of it is asked for until a person resumes it, in one sentence."""
    paused_by_hand: bool = False
    """Paused by a person (written down, so it outlasts the engine), not by itself."""
    failed_submissions: int = 0
    """Requests in a row that ended without a job (the site refused the submission)."""
    failed_starts: int = 0
    """Jobs in a row that ended or timed out before their worker attached."""
    site: SiteLimit = field(default_factory=SiteLimit)
    """What the site's accounting allows its jobs, as last read."""
    reading_site: bool = False
    """A call needs it and the site's limits are being read first: nothing goes out yet."""
    site_known: bool = False
    """Its site's limits were read once, by this engine or (written down) an earlier one."""

    @property
    def cap(self) -> int:
        """The most of its jobs alive at once: ``max_workers``, or the site's limit if less;
        one while a site that has limits was never read (it may allow no more)."""
        most = 1 if self.unread_site_bound else self.site.most_jobs
        configured = self.rule.profile.max_workers
        return configured if most is None else min(most, configured)

    @property
    def unread_site_bound(self) -> bool:
        """A site never read, not ``max_workers``, is what caps it (at one job)."""
        unread = self.site.most_jobs is None and self.rule.reads_site and not self.site_known
        return unread and self.rule.profile.max_workers > 1

    @property
    def site_bound(self) -> bool:
        """The site's limit, not ``max_workers``, is what caps it."""
        return self.site.most_jobs is not None and self.cap < self.rule.profile.max_workers


UNREAD_SITE = "what the site allows could not be read yet: one job at a time until it is"


@dataclass
class Poller:
    interval_s: float
    due_at: float | None = None
    polling: bool = False


class MachineState:
    """The machine's state, named once, with its queries and the small steps every rule
    takes: :class:`~.provisioning.ProvisioningMachine` owns it and gives it to its parts."""

    def __init__(self, rules: Iterable[ProfileRule], new_id: Callable[[], str]) -> None:
        self.new_id = new_id
        self.entries = {rule.key: ProfileEntry(rule) for rule in rules}
        self.pollers = {
            entry.rule.provisioner: Poller(entry.rule.settings.poll_interval_s)
            for entry in self.entries.values()
        }
        self.cancelling: set[str] = set()
        self.unwanted: set[str] = set()
        """Queued requests no waiting call would use, each withdrawn when its wake is due."""
        self.is_closing = False
        self.sites_read: set[str] = {r.provisioner for r in self.rules() if not r.reads_site}
        """Provisioners whose site's limits were read once (or that read none)."""

    def rules(self) -> list[ProfileRule]:
        return [entry.rule for entry in self.entries.values()]

    def rule(self, profile: str) -> ProfileRule:
        return self.entries[profile].rule

    def request(self, request_id: str) -> MachineRequest | None:
        found = self.find(request_id)
        return found[1] if found is not None else None

    def lost_requests(self, provisioner: str) -> list[str]:
        """Live requests whose submission's answer was lost: to look for by their mark."""
        return sorted(
            request.id
            for entry in self.of(provisioner)
            for request in entry.live.values()
            if request.job_id is None and request.answer_lost is not None
        )

    def jobs_to_poll(self, provisioner: str) -> list[str]:
        return sorted(
            {
                request.job_id
                for entry in self.of(provisioner)
                for request in entry.live.values()
                if request.job_id is not None
            }
        )

    def scheduler_profiles(self, paths_down: Mapping[str, str] | None = None) -> list[Profile]:
        """Every profile as the scheduler knows it, with how its provisioning stands;
        ``paths_down``: why each provisioner's workers cannot reach the engine, if so."""
        down = paths_down or {}
        return [
            as_scheduled(entry, down.get(entry.rule.provisioner)) for entry in self.entries.values()
        ]

    def profiles(self) -> list[ProfileStatus]:
        """Every profile: its outstanding request, live jobs, last error and workers."""
        return [
            ProfileStatus(
                provisioner=entry.rule.provisioner,
                type_name=entry.rule.type_name,
                profile=entry.rule.profile,
                outstanding=entry.outstanding,
                jobs=tuple(entry.live.values()),
                last_error=entry.last_error,
                retry_at=entry.resting_until,
                failures=entry.failures,
                login_needed=entry.login_needed,
                paused=entry.paused,
                site_limit=UNREAD_SITE if entry.unread_site_bound else entry.site.describe(),
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
            for entry in self.entries.values()
        ]

    def of(self, provisioner: str) -> list[ProfileEntry]:
        return [e for e in self.entries.values() if e.rule.provisioner == provisioner]

    def find(self, request_id: str) -> tuple[ProfileEntry, MachineRequest] | None:
        for entry in self.entries.values():
            request = entry.live.get(request_id)
            if request is not None:
                return entry, request
        return None

    def live(self, provisioner: str, request_id: str) -> tuple[ProfileEntry, MachineRequest] | None:
        found = self.find(request_id)
        return found if found is not None and found[0].rule.provisioner == provisioner else None

    def job_of(self, provisioner: str, profile: str, request_id: str) -> tuple[str, str] | None:
        """The job a live request of this profile runs as: how its provisioner calls its
        jobs (``"Grid Engine job"``) and its id; None if it is not live or has no job yet."""
        entry = self.entries.get(f"{provisioner}/{profile}")
        request = entry.live.get(request_id) if entry is not None else None
        if entry is None or request is None or request.job_id is None:
            return None
        return entry.rule.job_noun, request.job_id

    def entry_of(self, event: WorkerRecord) -> ProfileEntry | None:
        if event.provisioner is None or event.profile is None:
            return None
        return self.entries.get(f"{event.provisioner}/{event.profile}")

    def changed(self) -> list[Effect]:
        # While closing, what ends must not make the engine plan (and ask) again.
        return [] if self.is_closing else [Changed()]

    def arm_timeout(
        self, entry: ProfileEntry, request: MachineRequest, effects: list[Effect]
    ) -> None:
        """Cancel the request if its worker has not attached ``provision_timeout_s`` after
        it was made (0: never)."""
        timeout = entry.rule.settings.provision_timeout_s
        if timeout > 0:
            effects.append(Wake(f"timeout:{request.id}", request.created_at + timeout))

    def ensure_poll(self, provisioner: str, now: float, effects: list[Effect]) -> None:
        """The provisioner's next poll is due one interval from now (unless one is)."""
        poller = self.pollers[provisioner]
        if self.is_closing or poller.due_at is not None or poller.polling:
            return
        poller.due_at = now + poller.interval_s
        effects.append(Wake(f"poll:{provisioner}", poller.due_at))

    def cancel(
        self,
        entry: ProfileEntry,
        request: MachineRequest,
        message: str,
        effects: list[Effect],
        *,
        failed: bool = False,
    ) -> None:
        """Cancel the request's job (once), looking for it first if its submission's
        answer was lost; ``failed``: its end counts against the profile."""
        if request.id in self.cancelling:
            return
        self.cancelling.add(request.id)
        look_first = request.job_id is None and request.answer_lost is not None
        effects.append(
            Cancel(entry.rule.key, request.id, request.job_id, look_first, message, failed)
        )


def as_scheduled(entry: ProfileEntry, path_down: str | None = None) -> Profile:
    settings = entry.rule.profile
    return Profile(
        provisioner=entry.rule.provisioner,
        name=settings.name,
        labels=frozenset(settings.labels),
        cpus=settings.cpus,
        gpus=settings.gpus,
        ram_mb=settings.ram_mb,
        provisioning=_provisioning(entry, path_down),
        max_workers=entry.cap,
        walltime_s=entry.rule.walltime_s,
        notice_s=fitted_notice(entry.rule.walltime_s)
        if settings.notice_s is None
        else settings.notice_s,
        containers=None
        if settings.containers is None
        else Containers(settings.containers.runtime, tuple(settings.containers.allow_images)),
    )


def _provisioning(entry: ProfileEntry, path_down: str | None) -> Provisioning:
    request = entry.outstanding
    said, counting_down = _said(entry, path_down)
    return Provisioning(
        under_way=request is not None or entry.reading_site,
        resting_until=entry.resting_until,
        jobs=len(entry.live),
        said=said,
        counting_down=counting_down,
        paused=entry.paused is not None or entry.site.refused is not None,
    )


def _said(entry: ProfileEntry, path_down: str | None) -> tuple[str | None, bool]:
    """Why a call waiting for the profile waits, in one sentence (None: nothing to say yet),
    and whether the time left until it tries again follows it."""
    request, noun = entry.outstanding, entry.rule.job_noun
    cap = entry.cap
    attached = sum(r.stage is RequestStage.ATTACHED for r in entry.live.values())
    counting_down = False
    if path_down is not None:
        # Whatever its jobs do, no worker of theirs can attach until the path is back.
        said = path_down
    elif request is not None:
        said = _request_said(entry, request)
    elif entry.reading_site:
        said = "reading what the site allows its jobs, before the first submission"
    elif entry.site.refused is not None:
        said = f"the site would not run its jobs: {entry.site.refused}"
    elif entry.paused is not None:
        said = entry.paused
    elif entry.login_needed is not None:
        said = entry.login_needed
    elif entry.last_error is not None:
        said, counting_down = f"the last attempt failed ({entry.last_error[1]})", True
    elif cap_reached(len(entry.live), cap):
        # At the cap with none of them able to take it (their workers gone, or their
        # time too short): it waits for one of them to end.
        alive = f"{len(entry.live)} {noun}" + ("s are" if len(entry.live) != 1 else " is")
        site = f"the site's limit reached ({entry.site.why_most})"
        limit = site if entry.site_bound else "max_workers reached"
        if entry.unread_site_bound:
            limit = UNREAD_SITE
        return (
            f"{limit}: {alive} alive ({attached} with a worker); the next goes out when one ends"
        ), False
    else:
        return None, False
    # With room for several jobs, how many run comes first: "2 of 4 Slurm jobs running".
    count = f"{attached} of {cap} {noun}s running, " if cap > 1 and entry.live else ""
    return count + said, counting_down


def _request_said(entry: ProfileEntry, request: MachineRequest) -> str:
    """How the request under way stands: "Slurm job 41 PENDING (Priority)"."""
    status = _status_text(entry, request)
    if request.stage is RequestStage.SUBMITTING:
        return entry.rule.starting + (f": {status}" if status else "")
    said = f"{entry.rule.job_noun} {request.job_id} {status or 'submitted'}"
    if request.stage is RequestStage.STARTED:
        said += ", waiting for its worker to attach"
    return said


def _status_text(entry: ProfileEntry, request: MachineRequest) -> str | None:
    if request.answer_lost is not None:
        noun = entry.rule.job_noun
        return f"its answer was lost ({request.answer_lost}); looking for the {noun} by its mark"
    return request.status.describe() if request.status else None
