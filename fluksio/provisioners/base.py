"""What every provisioner is: its settings, its profiles, the states of what it asked for.

A provisioner asks some outside system (a batch scheduler, a cloud) for a machine whose
payload is an ordinary worker dialling back to the engine. Subclasses implement
:meth:`Provisioner.render` (pure: what would be submitted) and the asynchronous life cycle
:meth:`submit`, :meth:`poll`, :meth:`cancel` and :meth:`close`.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "TERMINAL_STATES",
    "JobState",
    "Profile",
    "Provisioner",
    "ProvisionerSettings",
    "Submission",
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
    profiles: list[Profile] = Field(min_length=1)


@dataclass(frozen=True)
class Submission:
    """A request the outside system accepted: its id there, and what was asked."""

    job_id: str
    profile: str


class Provisioner(ABC):
    """Base of every provisioner type; one instance per configured provisioner."""

    type_name: ClassVar[str]
    """The ``"type"`` in ``provisioners.json``."""
    settings_model: ClassVar[type[ProvisionerSettings]] = ProvisionerSettings

    def __init__(self, settings: ProvisionerSettings) -> None:
        self.settings = settings

    def profile(self, name: str) -> Profile:
        for profile in self.settings.profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in self.settings.profiles)
        raise KeyError(f"provisioner {self.settings.name!r} has no profile {name!r} ({known})")

    @abstractmethod
    def render(self, profile: Profile, *, token_file: str) -> str:
        """What would be submitted for ``profile``: pure, no I/O (a dry run)."""

    @abstractmethod
    async def submit(self, profile: Profile, *, token: str) -> Submission:
        """Ask for one machine of ``profile`` whose worker uses ``token``."""

    @abstractmethod
    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobState]:
        """The state of each outstanding request, in one round trip where possible."""

    @abstractmethod
    async def cancel(self, job_id: str) -> None:
        """Withdraw one request (and stop its machine if it runs)."""

    async def close(self) -> None:  # noqa: B027 - optional for types holding nothing open
        """Release what the provisioner holds open (connections); called at shutdown."""
