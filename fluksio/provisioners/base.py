"""What every provisioner is: its settings, its profiles, the states of what it asked for.

A provisioner asks some outside system (a batch scheduler, a cloud) for a machine whose
payload is an ordinary worker dialling back to the engine. A subclass of
:class:`Provisioner` implements :meth:`~Provisioner.render` (pure: what would be
submitted) and the asynchronous life cycle :meth:`~Provisioner.submit`,
:meth:`~Provisioner.poll` and :meth:`~Provisioner.cancel`; the engine's provisioning
driver awaits those methods directly. Hooks (:mod:`fluksio.provisioners.hookspecs`) are
for what extends the engine: registering provisioner types, and hearing of workers.
"""

from __future__ import annotations

import enum
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fluksio.errors import FluksioError
from fluksio.names import Name

__all__ = [
    "TERMINAL_STATES",
    "JobState",
    "JobStatus",
    "ProfileSettings",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "Submission",
    "WorkerRecord",
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
    replace_before_end_s: float | None = Field(default=None, ge=0, le=LONGEST_S, deprecated=True)
    """No longer used, still accepted so that existing files load: ``max_workers`` is a
    hard cap, and a job near its end frees its slot only when it ends (its idle worker is
    drained within ``--walltime-margin-s`` of the end)."""
    profiles: list[ProfileT] = Field(min_length=1)


def worker_argv(
    command: str, settings: ProvisionerSettings[Any], profile: ProfileSettings
) -> list[str]:
    """The command line of the worker one machine of ``profile`` runs (no token in it).

    The engine URL, a name, the profile's labels, ``--max-idle`` (unless 0), how many
    calls it runs at once, and the profile's resources as the worker should advertise
    them.
    """
    argv = [command, "--url", settings.engine_url, "--name", f"{settings.name}-{profile.name}"]
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
    backoff.
    """

    def __init__(self, detail: str, *, uncertain: bool = False, login_needed: bool = False) -> None:
        super().__init__(detail)
        self.uncertain = uncertain
        self.login_needed = login_needed


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


@dataclass(frozen=True)
class EngineLink:
    """What the engine's provisioning gives a provisioner when it starts it: where the
    engine listens, and what the provisioner reports to. Given once, by
    :meth:`Provisioner.start`; never hung on it afterwards."""

    address: tuple[str, int] | None
    """Where the engine listens, as its own machine reaches it (``127.0.0.1`` for a
    wildcard address); None where the engine serves no socket (an engine embedded in a
    test). What a provisioner that carries its workers' connections forwards to."""
    command_ran: Callable[[str, float, bool], None]
    """Time a command run remotely (``program, seconds, reached``): it becomes an event of
    the engine's stream and the ``fluksio_ssh_command_duration_seconds`` metric."""
    path_changed: Callable[[], None]
    """Call when :meth:`Provisioner.path_down` changes: the waiting calls' reasons and the
    Workers screen show it."""


WorkerEvent = WorkerRecord
"""The name :class:`WorkerRecord` had before it said what it is (a record, not an event):
kept so that plugins written against it still import."""


SettingsT = TypeVar("SettingsT", bound=ProvisionerSettings[Any])


class Provisioner(ABC, Generic[SettingsT, ProfileT]):
    """Base of every provisioner type; one instance per configured provisioner.

    A subclass names its settings and profile types as parameters
    (``Provisioner[SlurmSettings, SlurmProfile]``), sets :attr:`type_name` and
    :attr:`settings_model`, and implements the abstract methods. The engine's provisioning
    driver awaits them directly; a plugin writes no hook for the life cycle.
    """

    type_name: ClassVar[str]
    """The ``"type"`` in ``provisioners.json``."""
    settings_model: ClassVar[type[ProvisionerSettings[Any]]]
    """The pydantic model each configured entry of this type is validated with."""
    job_noun: ClassVar[str] = "job"
    """How its requests are called in sentences: ``"Slurm job"`` gives "Slurm job 12"."""
    state_dir: Path | None = None
    """A directory of its own under the engine's data directory, for what it keeps between
    calls (the Slurm provisioner's shared SSH connection). Set by the engine and the CLI
    before any call; None where nothing is kept (a dry run, a test). Create it 0700 on
    first use, not in the constructor."""
    link: EngineLink | None = None
    """What the engine's provisioning gave at :meth:`start`; None in a provisioner it never
    started (``fluksio provisioners check``, a dry run, a test of one call)."""

    def __init__(self, settings: SettingsT) -> None:
        self.settings = settings

    def start(self, link: EngineLink) -> None:
        """Called once by the engine's provisioning, before it asks anything else: where
        the engine listens, and what to report to. A subclass that extends it calls
        ``super().start(link)`` first."""
        self.link = link

    @property
    def engine_address(self) -> tuple[str, int] | None:
        """Where the engine listens (:attr:`EngineLink.address`); None until started."""
        return self.link.address if self.link is not None else None

    def command_ran(self, program: str, seconds: float, reached: bool) -> None:
        """Tell the engine a remote command ran (what a shell is given as its
        ``on_command`` when it is opened); nothing unless started."""
        if self.link is not None:
            self.link.command_ran(program, seconds, reached)

    def path_changed(self) -> None:
        """Tell the engine :meth:`path_down` changed; nothing unless started."""
        if self.link is not None:
            self.link.path_changed()

    @property
    def name(self) -> str:
        return self.settings.name

    def walltime_s(self, profile: ProfileT) -> float | None:
        """How long a job of ``profile`` may run; None: no limit. Its ``walltime_s`` by
        default; a subclass may read it from the profile's own options."""
        return profile.walltime_s

    def starting(self, profile: ProfileT) -> str:
        """How a request of ``profile`` under way is said on the calls waiting for it, until
        the outside system names a state: ``"submitting a Slurm job"`` by default (from
        :attr:`job_noun`); the SSH hosts provisioner says ``"starting a worker on
        gpu-box-2"``."""
        return f"submitting a {self.job_noun}"

    def reach(self) -> str:
        """How its workers reach the engine, as ``provisioners check`` says it."""
        return f"directly, at {self.settings.engine_url}"

    def path_down(self) -> str | None:
        """Why this provisioner's workers cannot reach the engine now, in one sentence
        (shown on waiting calls and the Workers screen); None when they can, or when it
        does not carry their connections (the default)."""
        return None

    def profile(self, name: str) -> ProfileT:
        profiles: list[ProfileT] = self.settings.profiles
        for profile in profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in profiles)
        raise KeyError(f"provisioner {self.settings.name!r} has no profile {name!r} ({known})")

    # -- what a subclass implements ----------------------------------------------------

    @abstractmethod
    def render(self, profile: ProfileT, *, request_id: str) -> str:
        """What would be submitted for ``profile``: pure, no I/O (a dry run).

        ``fluksio provisioners check --script`` prints it. ``request_id`` is the engine's
        id of the request: mark the job with it, so :meth:`find` can find a job whose id
        the engine never learned. The worker token is never part of the text.
        """

    @abstractmethod
    async def submit(self, profile: ProfileT, *, request_id: str, token: str) -> Submission:
        """Ask for one machine of ``profile`` whose worker uses ``token``.

        Called when a queued node needs capacity nothing attached could ever give and no
        request for ``profile`` is outstanding. ``token`` is minted for this request alone
        (24 h, the profile's labels): deliver it without putting it in argv, a job's
        environment listing or logs. Raise :class:`ProvisionError` with the outside
        system's own words when it refuses; the engine records them as the profile's last
        error and retries with capped backoff.
        """

    @abstractmethod
    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        """The state of each request, in one round trip where possible.

        Called once per ``poll_interval_s`` with every live request of this provisioner. A
        job missing from the answer has left the system: the engine treats it as ended.
        """

    @abstractmethod
    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        """Withdraw one request, stop its machine if it runs, and clean up after it.

        Called for every request that ends without its worker attaching: it outlived
        ``provision_timeout_s``, its job ended first, the engine stops, or (``job_id``
        None) a submission whose answer was lost left no job :meth:`find` could see.
        Remove what the submission left for the job (a token file). ``request_id`` is
        durable: a restarted engine passes it for requests an earlier run made. Cancelling
        a job that already ended must succeed quietly.
        """

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        """Jobs submitted for these requests whose ids the engine never learned.

        Called at a poll for submissions that were sent and whose answer was lost (a
        timeout, a dropped connection, an engine killed mid-submission). Return request id
        -> job id for every one the outside system holds (a job marked by :meth:`render`);
        the engine adopts each as if the submission had answered, and counts the others
        as never submitted. Raise :class:`ProvisionError` when the system cannot be asked.

        The default finds nothing: a provisioner that cannot mark its jobs.
        """
        return {}

    async def check(self) -> str:
        """Prove access to the outside system; return what it said (``sinfo``).

        Called by ``fluksio provisioners check --ssh``; optional.
        """
        return "nothing to check"

    async def close(self) -> None:
        """Release what the provisioner holds open (connections); called at shutdown."""
