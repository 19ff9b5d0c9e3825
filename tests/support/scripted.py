"""A provisioner whose outside system is a dict the test reads and writes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from fluksio.provisioners import (
    EngineLink,
    JobState,
    JobStatus,
    ProfileSettings,
    Provisioner,
    ProvisionError,
    ProvisionerSettings,
    Submission,
)
from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage

__all__ = ["RecordingEngine", "Scripted", "Settings", "listening_at", "scripted_settings"]

Settings = ProvisionerSettings[ProfileSettings]


def listening_at(port: int) -> EngineLink:
    """What an engine listening on 127.0.0.1:``port`` starts a provisioner with, its
    reports going nowhere: an engine's instance of the provisioner, not a dry run's."""
    return EngineLink(("127.0.0.1", port), lambda *_ran: None, lambda: None)


class Scripted(Provisioner[Settings, ProfileSettings]):
    """Jobs are entries of ``self.jobs``; ``gate`` holds submissions until it is set.

    ``lose_answer`` makes the next submission queue its job and then fail as a timeout
    would (uncertain); ``marks`` is what :meth:`find` sees: request id -> job id. While
    ``logged_out``, every call fails as a login node asking for a one-time code would;
    ``login_checks`` counts how often the driver asked whether that is still so.
    """

    type_name = "scripted"
    settings_model = Settings

    def __init__(self, settings: Settings, **given: Any) -> None:
        super().__init__(settings, **given)
        self.jobs: dict[str, JobStatus] = {}
        self.submitted: list[str] = []
        self.cancelled: list[str | None] = []
        self.cleaned: list[str] = []
        self.marks: dict[str, str] = {}
        self.lose_answer = False
        self.find_error: str | None = None
        self.polls = 0
        self.tokens: list[str] = []
        self.refuse: str | None = None
        self.refused: list[str] = []
        """The requests whose submission ``refuse`` refused."""
        self.poll_error: str | None = None
        self.logged_out = False
        self.login_checks = 0
        self.path: str | None = None
        """Why its workers cannot reach the engine now (a login route down), if so."""
        self.gate = asyncio.Event()
        self.gate.set()

    def path_down(self) -> str | None:
        return self.path

    def set_path(self, sentence: str | None) -> None:
        """The way in goes down (a sentence) or comes back (None), as a login route says."""
        self.path = sentence
        self.path_changed()

    def render(self, profile: ProfileSettings, *, request_id: str) -> str:
        return f"run a worker for {profile.name}\n"

    async def submit(self, profile: ProfileSettings, *, request_id: str, token: str) -> Submission:
        await self.gate.wait()
        self._logged_in()
        if self.refuse:
            self.refused.append(request_id)
            raise ProvisionError(self.refuse)
        job_id = str(100 + len(self.submitted))
        self.submitted.append(request_id)
        self.tokens.append(token)
        self.jobs[job_id] = JobStatus(JobState.PENDING, "PENDING", "Priority")
        self.marks[request_id] = job_id
        if self.lose_answer:
            self.lose_answer = False
            raise ProvisionError("sbatch did not answer within 60 s", uncertain=True)
        return Submission(job_id, profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        self.polls += 1
        self._logged_in()
        if self.poll_error:
            raise ProvisionError(self.poll_error)
        return {job_id: self.jobs[job_id] for job_id in job_ids if job_id in self.jobs}

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        if self.find_error:
            raise ProvisionError(self.find_error)
        return {r: self.marks[r] for r in request_ids if self.marks.get(r) in self.jobs}

    @property
    def shell(self) -> ScriptedLogin:
        """A shell sharing a person's login, as the system ``ssh`` does."""
        return ScriptedLogin(self)

    def _logged_in(self) -> None:
        if self.logged_out:
            raise ProvisionError("box: a login without a person was refused", login_needed=True)

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        self.cancelled.append(job_id)
        self.cleaned.append(request_id)
        if job_id is not None:
            self.jobs.pop(job_id, None)


def scripted_settings(**changes: Any) -> Settings:
    config: dict[str, Any] = {
        "type": "scripted",
        "name": "box",
        "engine_url": "ws://127.0.0.1:1/api/v1/workers/attach",
        "poll_interval_s": 5,
        "profiles": [{"name": "small", "labels": ["hpc"]}],
        **changes,
    }
    return Settings.model_validate(config)


class RecordingEngine:
    """The engine's side of the driver, recording what it was told."""

    def __init__(self) -> None:
        self.revoked: list[str] = []
        self.stored: dict[str, MachineRequest] = {}
        self.written: list[tuple[str, str | None, RequestStage]] = []
        self.paused: dict[str, str] = {}
        self.sites: dict[str, SiteLimit] = {}
        self.changes = 0

    def mint_token(
        self, provisioner: str, profile: ProfileSettings, request_id: str
    ) -> tuple[str, str]:
        return f"token-{request_id}", f"jti-{request_id}"

    def revoke_token(self, jti: str, reason: str) -> None:
        self.revoked.append(jti)

    def remember(self, request: MachineRequest) -> None:
        self.stored[request.id] = request
        self.written.append((request.id, request.job_id, request.stage))

    def forget(self, request_id: str) -> None:
        self.stored.pop(request_id, None)

    def remember_pause(self, profile: str, said: str | None) -> None:
        if said is None:
            self.paused.pop(profile, None)
        else:
            self.paused[profile] = said

    def remember_site(self, profile: str, limit: SiteLimit) -> None:
        self.sites[profile] = limit

    def site_limits(self) -> dict[str, SiteLimit]:
        return dict(self.sites)

    def pauses(self) -> dict[str, str]:
        return dict(self.paused)

    def changed(self) -> None:
        self.changes += 1


class ScriptedLogin:
    """The shared login of a :class:`Scripted` provisioner: ``logged_out`` is its state."""

    def __init__(self, provisioner: Scripted) -> None:
        self._provisioner = provisioner

    async def login_needed(self) -> bool:
        self._provisioner.login_checks += 1
        return self._provisioner.logged_out

    async def logged_in(self) -> bool:
        return not self._provisioner.logged_out

    async def logout(self) -> bool:
        self._provisioner.logged_out = True
        return True

    def login_argv(self) -> list[str] | None:
        return None
