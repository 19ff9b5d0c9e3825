"""Machine requests and profiles as plain data: what the provisioning machine keeps and
shows, and what the engine writes down and the API reads."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from fluksio.provisioners.base import JobStatus, ProfileSettings, ProvisionerSettings

__all__ = [
    "BroughtWorker",
    "MachineRequest",
    "ProfileRule",
    "ProfileStatus",
    "RequestStage",
    "login_sentence",
]


class RequestStage(enum.StrEnum):
    """Where one machine request stands, from the engine's side."""

    SUBMITTING = "submitting"
    """Being handed to the outside system; its job id is not known yet."""
    QUEUED = "queued"
    """Accepted (it has a job id), not running yet."""
    STARTED = "started"
    """Running; its worker has not attached yet."""
    ATTACHED = "attached"
    """Its worker attached: the request is fulfilled."""
    ENDED = "ended"
    """Its job ended, was cancelled, or it failed."""


def login_sentence(provisioner: str) -> str:
    """What a profile shows while it waits for a person to log in."""
    return f"login needed: run 'fluksio provisioners login {provisioner}'"


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
    withdrawn: bool = False
    """The engine cancelled it as it stopped (it will not wait for its worker): however
    its job ends, that is no failed start, and the next engine finishes the cancel."""


@dataclass(frozen=True)
class ProfileRule:
    """A configured profile as the machine needs it, read once at start."""

    provisioner: str
    type_name: str
    job_noun: str
    settings: ProvisionerSettings[Any]
    profile: ProfileSettings
    walltime_s: float | None
    starting: str = "submitting a job"
    """The provisioner's words for a request under way (:meth:`Provisioner.starting`)."""
    reads_site: bool = False
    """Its provisioner reads the site's limits (:meth:`Provisioner.site_limits`): nothing
    is submitted before the first reading has ended."""

    @property
    def key(self) -> str:
        return f"{self.provisioner}/{self.profile.name}"


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
    path_down: str | None = None
    """While its workers cannot reach the engine (the login route is down): why."""
    paused: str | None = None
    """While nothing of it is asked for until a person resumes it: why, in one sentence."""
    site_limit: str | None = None
    """What the site's accounting allows its jobs (``at most 2 jobs at once: QOS 'short'
    allows 2 jobs per user (MaxSubmitJobsPerUser)``), or why it runs none of them."""
