"""What every provisioner is: its settings, its profiles, the states of what it asked for.

A provisioner asks some outside system (a batch scheduler, a cloud) for a machine whose
payload is an ordinary worker dialling back to the engine. Subclasses implement
:meth:`Provisioner.render` (pure: what would be submitted) and the asynchronous life cycle
:meth:`~Provisioner.submit`, :meth:`~Provisioner.poll`, :meth:`~Provisioner.cancel`; the
engine reaches them through the hooks of :mod:`fluksio.provisioners.hookspecs`, which this
base class implements for every subclass by delegating to those methods.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from fluksio.errors import FluksioError
from fluksio.provisioners.hookspecs import hookimpl

__all__ = [
    "TERMINAL_STATES",
    "JobState",
    "JobStatus",
    "Profile",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "Submission",
    "WorkerEvent",
    "worker_argv",
]

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]


class JobState(enum.Enum):
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


class Profile(BaseModel):
    """Capacity one request brings: what the scheduler may ask this provisioner for."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    cpus: int | None = Field(default=None, ge=1)
    gpus: int | None = Field(default=None, ge=0)
    ram_mb: int | None = Field(default=None, ge=1)
    labels: list[Name] = Field(default_factory=list, max_length=32)


class ProvisionerSettings(BaseModel):
    """One entry of ``provisioners.json``; a provisioner type extends it with its own."""

    model_config = ConfigDict(extra="forbid")

    type: str
    name: Name
    engine_url: str = Field(min_length=1)
    """The attach URL the worker dials, as the machine sees the engine."""
    max_idle_s: float = Field(default=300, ge=0)
    """The worker exits after this long with nothing to run (0: never)."""
    provision_timeout_s: float = Field(default=900, ge=0)
    """A request whose worker has not attached by then is cancelled (0: wait forever)."""
    poll_interval_s: float = Field(default=10, gt=0)
    """How often the states of all live requests are read (one call for all of them)."""
    retry_base_s: float = Field(default=10, gt=0)
    """After a failed request the profile rests this long, doubling per failure in a row."""
    retry_max_s: float = Field(default=600, gt=0)
    """The longest rest between attempts."""
    profiles: list[Profile] = Field(min_length=1)


def worker_argv(command: str, settings: ProvisionerSettings, profile: Profile) -> list[str]:
    """The command line of the worker one machine of ``profile`` runs (no token in it).

    The engine URL, a name, the profile's labels, ``--max-idle`` (unless 0), and the
    profile's resources as the worker should advertise them.
    """
    argv = [command, "--url", settings.engine_url, "--name", f"{settings.name}-{profile.name}"]
    if profile.labels:
        argv += ["--labels", ",".join(profile.labels)]
    if settings.max_idle_s:
        argv += ["--max-idle", f"{settings.max_idle_s:g}"]
    for flag, amount in (("--cpus", profile.cpus), ("--gpus", profile.gpus)):
        if amount is not None:
            argv += [flag, str(amount)]
    if profile.ram_mb is not None:
        argv += ["--ram-mb", str(profile.ram_mb)]
    return argv


class ProvisionError(FluksioError):
    """The outside system refused or could not be reached; the message says so in its words."""


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
class WorkerEvent:
    """A worker attached or went away; what ties it to a request, if anything does.

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


class Provisioner(ABC):
    """Base of every provisioner type; one instance per configured provisioner.

    Subclasses set :attr:`type_name` and :attr:`settings_model` and implement the abstract
    methods. The instance is registered with the engine's plugin manager, so it receives
    the hooks of :mod:`~fluksio.provisioners.hookspecs`; each is answered only for calls
    naming this provisioner.
    """

    type_name: ClassVar[str]
    """The ``"type"`` in ``provisioners.json``."""
    settings_model: ClassVar[type[ProvisionerSettings]] = ProvisionerSettings
    job_noun: ClassVar[str] = "job"
    """How its requests are called in sentences: ``"Slurm job"`` gives "Slurm job 12"."""

    def __init__(self, settings: ProvisionerSettings) -> None:
        self.settings = settings

    @property
    def name(self) -> str:
        return self.settings.name

    def profile(self, name: str) -> Profile:
        for profile in self.settings.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.settings.profiles)
        raise KeyError(f"provisioner {self.settings.name!r} has no profile {name!r} ({known})")

    # -- what a subclass implements ----------------------------------------------------

    @abstractmethod
    def render(self, profile: Profile, *, token_file: str) -> str:
        """What would be submitted for ``profile``: pure, no I/O (a dry run)."""

    @abstractmethod
    async def submit(self, profile: Profile, *, request_id: str, token: str) -> Submission:
        """Ask for one machine of ``profile`` whose worker uses ``token``.

        Raise :class:`~fluksio.errors.FluksioError` with the outside system's own message
        when it refuses; the engine records it and retries later.
        """

    @abstractmethod
    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        """The state of each request, in one round trip where possible.

        A job missing from the answer has left the system (ended, state unknown).
        """

    @abstractmethod
    async def cancel(self, job_id: str) -> None:
        """Withdraw one request (and stop its machine if it runs)."""

    async def check(self) -> str:
        """Prove access to the outside system; return what it said (``sinfo``)."""
        return "nothing to check"

    async def close(self) -> None:  # noqa: B027 - optional for types holding nothing open
        """Release what the provisioner holds open (connections); called at shutdown."""

    def worker_attached(self, worker: WorkerEvent) -> None:  # noqa: B027 - optional
        """A worker attached (see :func:`~.hookspecs.fluksio_worker_attached`)."""

    def worker_gone(self, worker: WorkerEvent) -> None:  # noqa: B027 - optional
        """A worker went away (see :func:`~.hookspecs.fluksio_worker_gone`)."""

    # -- the hooks, answered for this provisioner's name only --------------------------

    @hookimpl
    def fluksio_provisioner_render(
        self, provisioner: str, profile: str, token_file: str
    ) -> str | None:
        if provisioner != self.name:
            return None
        return self.render(self.profile(profile), token_file=token_file)

    @hookimpl
    def fluksio_provisioner_submit(
        self, provisioner: str, profile: str, request_id: str, token: str
    ) -> Awaitable[Submission] | None:
        if provisioner != self.name:
            return None
        return self.submit(self.profile(profile), request_id=request_id, token=token)

    @hookimpl
    def fluksio_provisioner_poll(
        self, provisioner: str, job_ids: list[str]
    ) -> Awaitable[Mapping[str, JobStatus]] | None:
        return self.poll(job_ids) if provisioner == self.name else None

    @hookimpl
    def fluksio_provisioner_cancel(self, provisioner: str, job_id: str) -> Awaitable[None] | None:
        return self.cancel(job_id) if provisioner == self.name else None

    @hookimpl
    def fluksio_worker_attached(self, worker: WorkerEvent) -> None:
        self.worker_attached(worker)

    @hookimpl
    def fluksio_worker_gone(self, worker: WorkerEvent) -> None:
        self.worker_gone(worker)
