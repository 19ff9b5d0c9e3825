"""Attached workers, every place's amounts, the queue with why each call waits, and
provisioning (``GET /workers``, ``GET /workers/resources``)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Literal

from pydantic import Field, RootModel

from fluksio.wire.answers.base import Answer


class WaitKind(enum.StrEnum):
    """Why a request waits, as a category the API and the Workers screen can group by."""

    # The scheduler's own kinds, word for word (it imports nothing of the wire; a test
    # holds the two lists together), so that a client reads them without the scheduler.
    NO_WORKER = "no_worker"
    BUSY = "busy"
    TOO_LARGE = "too_large"
    PROVISIONING = "provisioning"
    WALLTIME = "walltime"


class AmountsBody(Answer):
    """Amounts of a place; null where the place did not report one."""

    gpus: int | None
    cpus: int | None
    ram_mb: int | None
    slots: int


class TokenRef(Answer):
    jti: str
    name: str


class ContainersBody(Answer):
    """The containers a worker runs calls in (``fluksio-worker --containers``)."""

    runtime: str
    allow_images: list[str]
    """Its ``--allow-image`` patterns: a call naming an image goes only where one matches."""
    held: list[str]
    """The images it holds ready (found at its start, or pulled for a call): a call in
    one prefers it among the workers that fit."""


class WorkerBody(Answer):
    id: str
    name: str
    labels: list[str]
    parallel: int
    pipeline: int = 0
    """Calls it takes ahead of its free slots (``--pipeline``): counted in ``in_flight``."""
    sent_ahead: int = 0
    """Of ``in_flight``, the calls it holds ahead of a free slot, not yet started."""
    cached_artifacts: int = 0
    """How many artifacts of 1 MiB or more its cache reports holding (our agent only):
    a call reading them prefers it among the workers that fit."""
    containers: ContainersBody | None = None
    """The containers it runs calls in; null: none."""
    in_flight: int
    """The calls sent to it and not yet answered: running, and held ahead."""
    status: Literal["busy", "idle", "not answering", "stopping"]
    """``not answering`` once it missed a ping: it gets no new calls until it answers;
    ``stopping`` once it said it was told to stop: it gets no new calls again."""
    attached_at: datetime
    last_seen: datetime
    python: str
    """The interpreter the worker runs calls with (a path on that machine)."""
    python_version: str | None
    """Its version, ``major.minor``; null for a published 0.1.x agent, which does not say."""
    venv_digest: str
    version: str
    protocol: int
    slurm_job_id: str | None
    batch_job: str | None
    """The batch job of the provisioning request that brought it, as its provisioner calls
    it (``"Grid Engine job 12"``); null for a worker no provisioner brought."""
    host: str | None
    """The machine's host name, as the worker reported it (a published agent does not)."""
    ends_at: datetime | None
    """When its batch job ends (its walltime); null when it does not, or does not say."""
    token: TokenRef
    inventory: AmountsBody | None
    free: AmountsBody | None


class RefusedWorkerBody(Answer):
    name: str
    status: Literal["needs upgrade"] = "needs upgrade"
    protocol: int | None
    version: str | None
    python: str | None
    refused_at: datetime
    reason: str


class WorkerList(RootModel[list[WorkerBody | RefusedWorkerBody]]):
    """``GET /workers``: the attached workers, then those refused for their protocol."""


class PlaceBody(Answer):
    id: str
    name: str
    labels: list[str]
    inventory: AmountsBody
    free: AmountsBody


class LabelCapacity(Answer):
    """Attached capacity carrying one label: workers, and their known amounts summed."""

    workers: int = 0
    inventory: dict[str, int] = Field(default_factory=dict)
    free: dict[str, int] = Field(default_factory=dict)


class WaitingBody(Answer):
    call_id: str
    run_id: str
    flow: str
    node: str
    worker: str | None
    queued_at: datetime | None
    reason: str | None
    kind: WaitKind | None
    items: int | None = None
    """An array: how many of its items wait, this call the first of them in line (the
    array is listed once, however many of its items wait)."""


Stage = Literal["submitting", "queued", "started", "attached", "ended"]
"""Where a machine request stands, from the engine's side."""


class MachineRequestBody(Answer):
    request_id: str
    job_id: str | None
    stage: Stage
    state: str | None
    """The outside system's name for its state (Slurm's ``PENDING``)."""
    reason: str | None
    since: datetime
    submitted_at: datetime
    answer_lost: str | None
    """Why the submission's answer never came, while its job is looked for by its mark."""


class ErrorAt(Answer):
    at: datetime
    message: str


class BroughtWorkerBody(Answer):
    id: str
    name: str
    job_id: str | None
    attached_at: datetime


class ProfileBody(Answer):
    name: str
    labels: list[str]
    cpus: int | None
    gpus: int | None
    ram_mb: int | None
    max_workers: int
    """How many of its jobs may exist at once, as configured (``site_limit`` may allow
    fewer)."""
    parallel: int
    """Calls at once on each of its workers."""
    outstanding: MachineRequestBody | None
    jobs: list[MachineRequestBody]
    jobs_by_stage: dict[Stage, int]
    """How many live jobs are in each stage (stages with none are left out)."""
    last_error: ErrorAt | None
    retry_at: datetime | None
    failures: int
    login_needed: str | None
    """``login needed: run 'fluksio provisioners login hpc'`` while nothing can be
    submitted until a person logs in (a one-time code); else null."""
    path_down: str | None
    """While the profile's workers cannot reach the engine (its login route is down), why,
    in one sentence; else null."""
    paused: str | None = None
    """While nothing is asked of it until a person resumes it, why (``paused after 10
    failed submissions in a row (the last: ...); resume with 'fluksio provisioners resume
    hpc/cpu'``, or ``paused by alice; ...``); else null."""
    site_limit: str | None = None
    """What the site's own accounting allows its jobs, as last read (``at most 2 jobs at
    once: QOS 'short' allows 2 jobs per user (MaxSubmitJobsPerUser)``), or why the site
    would run none of them (nothing of it is asked for while that stands), or that it could
    not be read yet (one job at a time until it is); null: no limit beyond
    ``max_workers``."""
    workers: list[BroughtWorkerBody]


class ProvisionerBody(Answer):
    name: str
    type: str
    profiles: list[ProfileBody]


class ResourcesBody(Answer):
    places: list[PlaceBody]
    labels: dict[str, LabelCapacity]
    queued: list[WaitingBody]
    provisioners: list[ProvisionerBody]
