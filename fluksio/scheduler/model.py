"""The scheduler's vocabulary: plain frozen data in, decisions out.

Resource amounts are whole numbers. ``None`` means *unknown* on a place (a worker that did
not report it) and *not asked for* on a request; an unknown amount never constrains, and
nothing is allocated on it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ENGINE_ID",
    "Placement",
    "Policy",
    "Profile",
    "ProvisionAsk",
    "Request",
    "WaitKind",
    "WaitReason",
    "Worker",
]

ENGINE_ID = "@engine"
"""The id of the engine as a place to run; no worker can have it (worker ids have no ``@``)."""


class Policy(enum.Enum):
    """What a request with a label does when no attached worker carries that label."""

    REQUIRE = "require"
    """Wait for a worker carrying the label (and provision one if a profile fits)."""
    PREFER = "prefer"
    """Run on the engine instead. Attached but busy still means wait."""


@dataclass(frozen=True)
class Request:
    """One node call waiting to run."""

    id: str
    queued_at: float
    label: str | None = None
    policy: Policy = Policy.REQUIRE
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None

    def __post_init__(self) -> None:
        for name in ("cpus", "gpus", "ram_mb"):
            amount = getattr(self, name)
            if amount is not None and amount < 0:
                raise ValueError(f"{name} must not be negative, got {amount}")


@dataclass(frozen=True)
class Worker:
    """A place to run: an attached worker, or the engine itself (``id == ENGINE_ID``).

    ``slots`` is how many calls it takes at once (``--parallel``). ``gpu_ids`` are the
    device indices it may hand out; by default ``0 .. gpus - 1``.
    """

    id: str
    name: str
    labels: frozenset[str] = frozenset()
    slots: int = 1
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None
    gpu_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.slots < 0:
            raise ValueError(f"slots must not be negative, got {self.slots}")
        for name in ("cpus", "gpus", "ram_mb"):
            amount = getattr(self, name)
            if amount is not None and amount < 0:
                raise ValueError(f"{name} must not be negative, got {amount}")
        if self.gpu_ids is not None and (self.gpus is None or len(set(self.gpu_ids)) != self.gpus):
            raise ValueError("gpu_ids must list exactly `gpus` distinct indices")

    @property
    def device_ids(self) -> tuple[int, ...]:
        if self.gpu_ids is not None:
            return self.gpu_ids
        return tuple(range(self.gpus or 0))


@dataclass(frozen=True)
class Profile:
    """Capacity a provisioner could add: what one submitted job would attach."""

    provisioner: str
    name: str
    labels: frozenset[str]
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None
    outstanding: bool = False
    """A request for this profile is already under way; it is never asked for twice."""

    @property
    def key(self) -> str:
        return f"{self.provisioner}/{self.name}"


@dataclass(frozen=True)
class Placement:
    """Run request ``request_id`` on ``worker_id`` (``ENGINE_ID`` for the engine).

    ``gpu_ids`` become ``CUDA_VISIBLE_DEVICES``; ``threads`` caps the numerical libraries'
    thread pools (None: leave them alone, the place did not report its cores).
    """

    request_id: str
    worker_id: str
    gpu_ids: tuple[int, ...]
    threads: int | None
    cpus: int
    gpus: int
    ram_mb: int


@dataclass(frozen=True)
class ProvisionAsk:
    """Ask provisioner ``provisioner`` for one machine of ``profile``, on behalf of a request."""

    provisioner: str
    profile: str
    request_id: str


class WaitKind(enum.Enum):
    """Why a request waits, as a category the API and the Workers screen can group by."""

    NO_WORKER = "no_worker"
    """No attached worker carries the label, and no profile could add one."""
    BUSY = "busy"
    """Places that could run it exist, but none has what it needs free right now."""
    TOO_LARGE = "too_large"
    """No attached place and no profile is large enough: it cannot run as asked."""
    PROVISIONING = "provisioning"
    """A provisioner has been (or is now being) asked for a machine that fits."""


@dataclass(frozen=True)
class WaitReason:
    """Why a request waits: a sentence a person can act on, and the counts behind it.

    ``exhausted`` counts, per resource (``slots``, ``cpus``, ``gpus``, ``ram_mb``,
    ``reserved``), how many candidate places lacked it; ``reserved_on`` names the worker
    this request holds a reservation on, if any.
    """

    kind: WaitKind
    text: str
    exhausted: Mapping[str, int] = field(default_factory=dict)
    provisioning: str | None = None
    reserved_on: str | None = None
