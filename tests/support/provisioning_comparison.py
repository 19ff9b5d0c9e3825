"""The provisioning machine and its naive reference side by side, for the property test
(``tests/test_provisioning_machine.py``, which adds what happens and what must hold): the
outside system as a dict of jobs, what the engine wrote down, and each effect carried out
as the driver would, with both sides' decisions compared after every input."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Any

from hypothesis.stateful import RuleBasedStateMachine

from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobState,
    JobStatus,
    SiteLimit,
    WorkerRecord,
)
from fluksio.provisioners.machine.effects import (
    Cancel,
    CleanUp,
    Effect,
    Forget,
    Remember,
    RememberPause,
    Revoke,
    StartPoll,
    Submit,
    Unwake,
    Wake,
)
from fluksio.provisioners.machine.provisioning import ProvisioningMachine
from fluksio.provisioners.machine.reference import ReferenceProvisioning
from fluksio.provisioners.machine.requests import MachineRequest, ProfileRule
from tests.support.scripted import scripted_settings

__all__ = ["PROFILES", "ComparisonShell"]

PROFILES = ("box/small", "box/big")


def _rules(max_workers: int) -> list[ProfileRule]:
    settings_ = scripted_settings(
        poll_interval_s=5,
        provision_timeout_s=60,
        retry_base_s=2,
        retry_max_s=30,
        pause_after_failed_submissions=2,
        pause_after_failed_starts=2,
        profiles=[
            {"name": "small", "labels": ["hpc"], "max_workers": max_workers},
            {"name": "big", "labels": ["gpu"], "max_workers": 1},
        ],
    )
    # Its site's limits are read at its first need: nothing goes out before that.
    return [
        ProfileRule("box", "scripted", "job", settings_, profile, None, reads_site=True)
        for profile in settings_.profiles
    ]


@dataclasses.dataclass
class _Job:
    request_id: str
    status: JobStatus


class ComparisonShell(RuleBasedStateMachine):
    """Both implementations, the outside system they act on, and what they wrote down;
    each effect carried out as the driver would, and the decisions compared."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000.0
        self.max_workers = 2
        self.stored: dict[str, MachineRequest] = {}
        """What the engine wrote down (Remember, Forget): all a restarted engine has."""
        self.stored_pauses: dict[str, str] = {}
        """The pauses by hand the engine wrote down (RememberPause)."""
        self.jobs: dict[str, _Job] = {}
        """The outside system: job id -> its request's mark and state."""
        self.job_ids = (str(n) for n in itertools.count(100))
        self.revoked: set[str] = set()
        self.minted: dict[str, str] = {}
        self.attached: dict[str, WorkerRecord] = {}
        self.unreachable: set[str] = set()
        """Requests whose cancel failed: their jobs may run on, unwatched (said in the log)."""
        self.site_limits: dict[str, SiteLimit] = {}
        """What the site allows each profile, as last read (every engine reads it anew)."""
        self.engines = 0
        self._start()

    def _start(self) -> None:
        # Each engine numbers its requests from its own offset, the same for both.
        rules = _rules(self.max_workers)
        offset = 1_000 * self.engines
        self.engines += 1
        mine, theirs = itertools.count(offset), itertools.count(offset)
        self.machine = ProvisioningMachine(rules, lambda: f"q{next(mine)}")
        self.reference = ReferenceProvisioning(rules, lambda: f"q{next(theirs)}")
        self.submits: dict[str, Submit] = {}
        self.cancels: dict[str, Cancel] = {}
        self.polls: set[str] = set()
        self.wakes: dict[str, float] = {}
        self.attached.clear()
        self.site_limits.clear()
        self.closing = False

    # -- carrying out, and comparing decisions -------------------------------------------

    def both(self, method: str, *args: Any, **kwargs: Any) -> None:
        effects = getattr(self.machine, method)(*args, **kwargs) or []
        reference_method = "closing_down" if method == "closing" else method
        getattr(self.reference, reference_method)(*args, **kwargs)
        self.apply(effects)

    def apply(self, effects: list[Effect]) -> None:
        decided: list[tuple[object, ...]] = []
        for effect in effects:
            if isinstance(effect, Submit):
                assert effect.request_id not in self.submits
                profile = self._status(effect.profile)
                # Nothing goes out while a login is needed: only the question whether it still is.
                assert effect.check_login or profile.login_needed is None
                assert profile.paused is None, "a paused profile submitted"
                site = self.site_limits.get(effect.profile, SiteLimit())
                assert site.refused is None, "a profile the site refuses submitted"
                assert site.most_jobs is None or len(profile.jobs) <= site.most_jobs, (
                    "a submission past the site's limit"
                )
                self.submits[effect.request_id] = effect
                decided.append(("submit", effect.request_id))
            elif isinstance(effect, Cancel):
                assert effect.request_id not in self.cancels, "one cancel at a time"
                self.cancels[effect.request_id] = effect
                decided.append(("cancel", effect.request_id, effect.failed))
            elif isinstance(effect, CleanUp):
                self._cancel_job(effect.request_id)
                decided.append(("cleanup", effect.request_id))
            elif isinstance(effect, Revoke):
                self.revoked.add(effect.jti)
                decided.append(("revoke", effect.jti))
            elif isinstance(effect, Forget):
                self.stored.pop(effect.request_id, None)
                decided.append(("forget", effect.request_id))
            elif isinstance(effect, Remember | RememberPause):
                self._write_down(effect)
            elif isinstance(effect, StartPoll):
                self.polls.add(effect.provisioner)
            elif isinstance(effect, Wake):
                self.wakes[effect.key] = effect.at
            elif isinstance(effect, Unwake):
                self.wakes.pop(effect.key, None)
        expected = self.reference.decisions
        self.reference.decisions = []
        assert collections.Counter(decided) == collections.Counter(expected), (decided, expected)

    def _write_down(self, effect: Remember | RememberPause) -> None:
        if isinstance(effect, Remember):
            self.stored[effect.request.id] = dataclasses.replace(effect.request)
        elif effect.said is None:
            self.stored_pauses.pop(effect.profile, None)
        else:
            self.stored_pauses[effect.profile] = effect.said

    def _status(self, profile: str) -> Any:
        (found,) = [
            p for p in self.machine.profiles() if f"{p.provisioner}/{p.profile.name}" == profile
        ]
        return found

    def _cancel_job(self, request_id: str) -> None:
        for job in self.jobs.values():
            if job.request_id == request_id and job.status.state not in TERMINAL_STATES:
                job.status = JobStatus(JobState.CANCELLED, "CANCELLED")

    def _queue_job(self, request_id: str) -> str:
        job_id = next(self.job_ids)
        self.jobs[job_id] = _Job(request_id, JobStatus(JobState.PENDING, "PENDING", "Priority"))
        return job_id
