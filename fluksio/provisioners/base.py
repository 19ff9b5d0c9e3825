"""What every provisioner speaks in: its settings, its profiles, the states of what it
asked for, a submission and a worker's record. Plain data, which the pure provisioning
machine reads too; the class a provisioner subclasses is
:class:`~fluksio.provisioners.provisioner.Provisioner`.
"""

from __future__ import annotations

import enum
import shlex
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fluksio.errors import FluksioError
from fluksio.names import Name

__all__ = [
    "TERMINAL_STATES",
    "JobState",
    "JobStatus",
    "ProfileSettings",
    "ProvisionError",
    "ProvisionerSettings",
    "SiteLimit",
    "Submission",
    "WorkerRecord",
    "fitted_notice",
    "worker_argv",
]


class JobState(enum.StrEnum):
    """Where a request for a machine stands, whatever system it went to."""

    PENDING = "pending"
    """Accepted, waiting for resources."""
    RUNNING = "running"
    """The machine is up; its worker should be attaching (or attached)."""
    COMPLETED = "completed"
    """Ended normally (its worker exited, e.g. after ``--max-idle``)."""
    FAILED = "failed"
    """Ended in an error: it never ran, or its payload failed."""
    CANCELLED = "cancelled"
    """Cancelled, by us or by the system's operators."""
    TIMEOUT = "timeout"
    """Ended by a time limit."""
    UNKNOWN = "unknown"
    """The system reported a state this table does not know (logged with a warning)."""


TERMINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT}
)


LONGEST_S = 366 * 86400.0
"""A year and a day: the longest any duration of ``provisioners.json`` may be. Every number
there is finite and bounded (JSON as Python reads it allows ``NaN`` and ``1e400``)."""


NOTICE_S = 120.0
NOTICE_SHARE = 4


def fitted_notice(walltime_s: float | None) -> float:
    """A profile's notice, not set: :data:`NOTICE_S`, at most a quarter of its jobs'
    walltime (so a one- or two-minute job's calls are told in time and still run)."""
    return NOTICE_S if walltime_s is None else min(NOTICE_S, walltime_s / NOTICE_SHARE)


"""How long before its job's end stops it a call that set no limit is told, by default."""
NoticeSignal = Literal["SIGUSR1", "SIGUSR2", "SIGINT"]
"""The signals a notice may be. The runner catches SIGUSR1 and SIGUSR2 for a node that
does not (their default would end its process); SIGINT is Python's KeyboardInterrupt."""


class ProfileContainers(BaseModel):
    """The containers a profile's workers run calls in (``fluksio-worker --containers``
    and ``--allow-image``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    runtime: Literal["podman", "apptainer"] = "podman"
    allow_images: list[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9/*?\[][^\x00-\x20]{0,511}$")]
    ] = Field(min_length=1, max_length=64)
    """Patterns (``fnmatch``'s) of the images its calls may run in."""


class ProfileSettings(BaseModel):
    """One profile of ``provisioners.json``: the capacity one request brings."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    name: Name
    cpus: int | None = Field(default=None, ge=1, le=1 << 20)
    gpus: int | None = Field(default=None, ge=0, le=4096)
    ram_mb: int | None = Field(default=None, ge=1, le=1 << 40)
    labels: list[Name] = Field(default_factory=list, max_length=32)
    max_workers: int = Field(default=1, ge=1, le=1000)
    """How many jobs of this profile may exist at once. One is pending at a time; the next
    goes out once it attached and calls still wait for the profile's labels."""
    parallel: int | None = Field(default=None, ge=1, le=1024)
    """Calls at once on each of its workers (the worker's ``--parallel``); by default one
    per cpu of the profile (one-core calls), at least 1."""
    walltime_s: float | None = Field(default=None, gt=0, le=LONGEST_S)
    """How long each of its jobs may run. A provisioner may know it otherwise (Slurm reads
    ``--time`` from the profile's ``sbatch``); a call is asked for here only if its
    timeout fits."""
    notice_s: float | None = Field(default=None, ge=0, le=LONGEST_S)
    """A call that runs until its job's end (it set no ``limit``) gets the notice signal
    this long before it is stopped (the worker's ``--notice-s``). None: it fits the job,
    :data:`NOTICE_S` at most a quarter of its walltime (:func:`fitted_notice`), as the
    worker fits it by itself."""
    notice_signal: NoticeSignal = "SIGUSR1"
    """The signal that notice is (the worker's ``--notice-signal``)."""
    containers: ProfileContainers | None = None
    """Its workers run calls in containers: a call naming an image asks for this profile
    only if its patterns allow it. None: they run none."""

    @property
    def worker_parallel(self) -> int:
        return self.parallel or self.cpus or 1


ProfileT = TypeVar("ProfileT", bound=ProfileSettings)


class ProvisionerSettings(BaseModel, Generic[ProfileT]):
    """One entry of ``provisioners.json``; a provisioner type extends it with its own.

    Generic over the type of its profiles: ``ProvisionerSettings[SlurmProfile]``.
    """

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    type: str
    name: Name
    engine_url: str = Field(min_length=1)
    """The attach URL the worker dials, as the machine sees the engine."""
    other_engine_urls: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, max_length=8
    )
    """The attach URLs of the other engines of one database (one active, the others
    standby), as the machine sees them: the worker dials the next when one fails."""
    max_idle_s: float = Field(default=300, ge=0, le=LONGEST_S)
    """The worker exits after this long with nothing to run (0: never)."""
    provision_timeout_s: float = Field(default=900, ge=0, le=LONGEST_S)
    """A request whose worker has not attached by then is cancelled (0: wait forever)."""
    poll_interval_s: float = Field(default=10, gt=0, le=3600)
    """How often the states of all live requests are read (one call for all of them)."""
    retry_base_s: float = Field(default=10, gt=0, le=86400)
    """After a failed request the profile rests this long, doubling per failure in a row."""
    retry_max_s: float = Field(default=600, gt=0, le=LONGEST_S)
    """The longest rest between attempts."""
    pause_after_failed_submissions: int = Field(default=10, ge=0, le=1000)
    """A profile whose submissions failed this many times in a row (the site refused them:
    a wrong partition, an account out of hours) pauses itself until a person resumes it
    (0: never)."""
    pause_after_failed_starts: int = Field(default=3, ge=0, le=1000)
    """A profile whose jobs ended or timed out this many times in a row before their worker
    attached pauses itself until a person resumes it (0: never)."""
    replace_before_end_s: float | None = Field(default=None, ge=0, le=LONGEST_S, deprecated=True)
    """No longer used, still accepted so that existing files load: ``max_workers`` is a
    hard cap, and a job near its end frees its slot only when it ends (its idle worker is
    drained within ``--walltime-margin-s`` of the end)."""
    profiles: list[ProfileT] = Field(min_length=1)


def _engine_urls(settings: ProvisionerSettings[Any]) -> list[str]:
    """``--url`` for each engine: our agent takes each, the published one the last."""
    return [
        part
        for url in (settings.engine_url, *settings.other_engine_urls)
        for part in ("--url", url)
    ]


def worker_argv(
    command: str, settings: ProvisionerSettings[Any], profile: ProfileSettings
) -> list[str]:
    """The command line of the worker one machine of ``profile`` runs (no token in it).

    The engine URL, a name, the profile's labels, ``--max-idle`` (unless 0), how many
    calls it runs at once, and the profile's resources as the worker should advertise
    them.
    """
    argv = [command, *_engine_urls(settings), "--name", f"{settings.name}-{profile.name}"]
    if profile.labels:
        argv += ["--labels", ",".join(profile.labels)]
    if settings.max_idle_s:
        argv += ["--max-idle", f"{settings.max_idle_s:g}"]
    argv += ["--parallel", str(profile.worker_parallel)]
    for flag, amount in (("--cpus", profile.cpus), ("--gpus", profile.gpus)):
        if amount is not None:
            argv += [flag, str(amount)]
    if profile.ram_mb is not None:
        argv += ["--ram-mb", str(profile.ram_mb)]
    # Only when not the default: the published agent knows neither flag.
    if profile.notice_s is not None:  # else the worker fits it to its job, as the engine
        argv += ["--notice-s", f"{profile.notice_s:g}"]
    if profile.notice_signal != "SIGUSR1":
        argv += ["--notice-signal", profile.notice_signal]
    if profile.containers is not None:
        argv += ["--containers", profile.containers.runtime]
        for pattern in profile.containers.allow_images:
            argv += ["--allow-image", pattern]
    return argv


def exec_worker(
    command: str,
    settings: ProvisionerSettings[Any],
    profile: ProfileSettings,
    connect_to: str | None = None,
) -> str:
    """A script's last line: ``exec`` of the worker (:func:`worker_argv`), quoted, dialling
    ``connect_to`` (``HOST:PORT``, the login route) when given, still verifying the
    engine's own name."""
    worker = worker_argv(command, settings, profile)
    if connect_to is not None:
        worker += ["--connect-to", connect_to]
    return f"exec {shlex.join(worker)}"


class ProvisionError(FluksioError):
    """The outside system refused or could not be reached; the message says so in its words.

    ``uncertain`` is set when a submission was sent and its answer lost (a timeout, a
    dropped connection): the job may exist. The engine then looks for it with
    :meth:`Provisioner.find` instead of submitting again. ``login_needed`` is set when
    nothing reached the system because a person must log in first (a shell with a
    :func:`~fluksio.provisioners.login.shared_login`): the engine waits for that, without
    backoff. ``unreachable`` is set when nothing reached the system (its login node did not
    answer): the profile backs off, but a submission the site never saw is not its refusal,
    so it never adds to the failures in a row that pause a profile.
    """

    def __init__(
        self,
        detail: str,
        *,
        uncertain: bool = False,
        login_needed: bool = False,
        unreachable: bool = False,
    ) -> None:
        super().__init__(detail)
        self.uncertain = uncertain
        self.login_needed = login_needed
        self.unreachable = unreachable


@dataclass(frozen=True)
class JobStatus:
    """One request's state, as ours and in the outside system's own words."""

    state: JobState
    native: str
    """The system's name for the state, e.g. Slurm's ``PENDING``."""
    reason: str | None = None
    """Why it is in that state, in the system's words, e.g. Slurm's ``Priority``."""

    def describe(self) -> str:
        return f"{self.native} ({self.reason})" if self.reason else self.native


@dataclass(frozen=True)
class Submission:
    """A request the outside system accepted: its id there, and what was asked."""

    job_id: str
    profile: str


@dataclass(frozen=True)
class SiteLimit:
    """What the site's own accounting allows one profile's jobs (Slurm's association and
    QOS limits), as :meth:`~fluksio.provisioners.provisioner.Provisioner.site_limits`
    read it: the profile never asks past it."""

    most_jobs: int | None = None
    """The most of its jobs that may be queued or running at once; None: no such limit."""
    why_most: str = ""
    """Whose limit ``most_jobs`` is, in a phrase: ``QOS 'short' allows 2 jobs per user
    (MaxSubmitJobsPerUser)``."""
    refused: str | None = None
    """Why none of its jobs could ever run (it asks for more time than ``MaxWall``), in
    one sentence: nothing of it is asked for while it stands. None: nothing refused."""

    def describe(self) -> str | None:
        """As a person reads it (``check --ssh``, ``GET /workers/resources``): the refusal,
        else ``at most 2 jobs at once: ...``; None: no limit."""
        if self.refused is not None:
            return self.refused
        if self.most_jobs is None:
            return None
        jobs = f"{self.most_jobs} job" + ("" if self.most_jobs == 1 else "s")
        return f"at most {jobs} at once: {self.why_most}"


@dataclass(frozen=True)
class WorkerRecord:
    """A worker that attached or went away: who it is, and what ties it to a request, if
    anything does (what the worker hooks and the provisioning machine are given).

    ``provisioner``, ``profile`` and ``request_id`` come from the worker's signed token (the
    engine mints one per request); ``job_id`` is what the worker itself reported (e.g.
    ``SLURM_JOB_ID``).
    """

    worker_id: str
    name: str
    labels: tuple[str, ...]
    provisioner: str | None = None
    profile: str | None = None
    request_id: str | None = None
    job_id: str | None = None
    ends_at: float | None = None
    """When the worker's batch job ends (its walltime), as it reported; None: never."""


WorkerEvent = WorkerRecord
"""The name :class:`WorkerRecord` had before it said what it is (a record, not an event):
kept so that plugins written against it still import."""
