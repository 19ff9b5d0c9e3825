"""The scheduler's vocabulary: plain frozen data in, decisions out.

Resource amounts are whole numbers. ``None`` means *unknown* on a place (a worker that did
not report it) and *not asked for* on a request; an unknown amount never constrains, and
nothing is allocated on it.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "ENGINE_ID",
    "CallRequest",
    "Container",
    "Containers",
    "PlaceView",
    "Placement",
    "Policy",
    "Profile",
    "ProvisionAsk",
    "Provisioning",
    "Resources",
    "WaitKind",
    "WaitReason",
    "Worker",
    "cap_reached",
    "may_run",
]

ENGINE_ID = "@engine"
"""The id of the engine as a place to run; no worker can have it (worker ids have no ``@``)."""


class Policy(enum.StrEnum):
    """What a request with a label does when no attached worker carries that label."""

    REQUIRE = "require"
    """Wait for a worker carrying the label (and provision one if a profile fits)."""
    PREFER = "prefer"
    """Run on the engine instead. Attached but busy still means wait."""


class Container(NamedTuple):
    """The container a request runs in: its image, and the runtime it names (None: any)."""

    image: str
    runtime: str | None = None


class Containers(NamedTuple):
    """What containers a place runs: its runtime, and the images it allows, as patterns
    (``registry.example/*``)."""

    runtime: str
    images: tuple[str, ...]


@dataclass(frozen=True)
class CallRequest:
    """One node call waiting to run."""

    id: str
    queued_at: float
    label: str | None = None
    policy: Policy = Policy.REQUIRE
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None
    limit: float | None = None
    """The longest it may run, in seconds (its node's ``limit``); None: it does not say.

    Not the node's ``timeout``, which bounds silence, not duration, and so says nothing of
    when a call ends."""
    inputs: tuple[tuple[str, int], ...] = ()
    """The artifacts its arguments name, as (digest, size in bytes): among the places that
    fit, it goes where the most of those bytes are cached already."""
    container: Container | None = None
    """The container it runs in (its node's ``container``); None: none. It goes only to a
    place whose :class:`Containers` allow it (:func:`may_run`)."""

    def __post_init__(self) -> None:
        for name in ("cpus", "gpus", "ram_mb"):
            amount = getattr(self, name)
            if amount is not None and amount < 0:
                raise ValueError(f"{name} must not be negative, got {amount}")
        if self.limit is not None and self.limit <= 0:
            raise ValueError(f"limit must be positive or None, got {self.limit}")


@dataclass(frozen=True)
class Worker:
    """A place to run: an attached worker, or the engine itself (``id == ENGINE_ID``).

    ``slots`` is how many calls it runs at once (``--parallel``); ``pipeline`` how many
    more it takes ahead, each started as a slot frees (``--pipeline``), so that a far
    worker has its next call when one ends: a call sent ahead is placed, and takes its
    resources, like one that runs, and goes to a place with a slot free first. ``gpu_ids``
    are the device indices it may hand out; by default ``0 .. gpus - 1``.
    """

    id: str
    name: str
    labels: frozenset[str] = frozenset()
    slots: int = 1
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    ends_at: float | None = None
    """When its batch job ends (its walltime), as a Unix time; None: it does not end."""
    pipeline: int = 0
    notice_s: float = 0.0
    """How long before its job's end a call without a ``limit`` is told it will be stopped
    (the agent's ``--notice-s``): such a call goes here only while the notice and the
    margin still fit, so that it is never told at once, nor sent back where it was told."""
    containers: Containers | None = None
    """The containers it may run (the agent's ``--containers`` and ``--allow-image``);
    None: it runs none."""

    def __post_init__(self) -> None:
        if self.slots < 0:
            raise ValueError(f"slots must not be negative, got {self.slots}")
        if self.pipeline < 0:
            raise ValueError(f"pipeline must not be negative, got {self.pipeline}")
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
class Provisioning:
    """How a profile's provisioning stands, as the provisioning side tells it: what the
    scheduler decides on, and one sentence of why a call waiting for it waits.

    The sentence is composed where the states are known (``fluksio.provisioners``); a new
    way a provisioner can be blocked changes that sentence, never this class.
    """

    under_way: bool = False
    """A request of it is being submitted, is queued or is starting: no other goes out."""
    resting_until: float | None = None
    """After a failure: until when none goes out."""
    jobs: int = 0
    """Its live requests: the one under way, and those whose worker started or attached
    (until their job ends); none goes out at its ``max_workers``."""
    said: str | None = None
    """Why a call waiting for it waits (``Slurm job 41 PENDING (Priority)``); None while
    the provisioning side has said nothing of it yet."""
    counting_down: bool = False
    """``said`` is followed by the time left until :attr:`resting_until` ("trying again
    in 20 s"), which only the moment a reason is read knows."""
    paused: bool = False
    """None goes out: paused (by a person, or by itself after failures in a row) until it
    is resumed, or refused by its site (its limits, read again every few minutes)."""

    @property
    def outstanding(self) -> bool:
        """A request is under way, or the profile rests or is paused: it is not asked for
        again."""
        return self.under_way or self.resting_until is not None or self.paused


def may_run(containers: Containers | None, container: Container | None) -> bool:
    """Whether a place (or a profile's machine) allowing ``containers`` may run a request
    in ``container``: every place runs one in none; one in an image, where the runtime is
    the one it names (if it names one) and a pattern matches the image (:func:`image_matches`)."""
    if container is None:
        return True
    if containers is None or container.runtime not in (None, containers.runtime):
        return False
    return any(image_matches(pattern, container.image) for pattern in containers.images)


def image_matches(pattern: str, image: str) -> bool:
    """An ``--allow-image`` pattern matches an image segment by segment, ``fnmatch``'s way
    (case and all) within each: its ``*`` never crosses a ``/`` (the worker's own rule)."""
    wanted, given = pattern.split("/"), image.split("/")
    return len(wanted) == len(given) and all(
        fnmatch.fnmatchcase(part, glob) for part, glob in zip(given, wanted, strict=True)
    )


def cap_reached(jobs: int, max_workers: int) -> bool:
    """Whether ``jobs`` alive fill a profile's ``max_workers``: the one place the cap is
    spelt, for the scheduler's decisions and provisioning's sentence alike."""
    return jobs >= max_workers


@dataclass(frozen=True)
class Profile:
    """Capacity a provisioner could add: what one submitted job would attach."""

    provisioner: str
    name: str
    labels: frozenset[str]
    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None
    provisioning: Provisioning = Provisioning()
    """How its provisioning stands (the driver's, and only the driver's, to say)."""
    max_workers: int = 1
    """How many of its jobs may exist at once."""
    walltime_s: float | None = None
    """How long each of its jobs may run; None: no limit."""
    notice_s: float = 0.0
    """Its workers' notice (:attr:`Worker.notice_s`): a call without a ``limit`` asks for
    it only if its jobs outlive the margin and the notice."""
    containers: Containers | None = None
    """The containers its workers may run (:attr:`Worker.containers`)."""

    @property
    def key(self) -> str:
        return f"{self.provisioner}/{self.name}"

    @property
    def outstanding(self) -> bool:
        return self.provisioning.outstanding

    @property
    def at_cap(self) -> bool:
        """``max_workers`` of its jobs are alive."""
        return cap_reached(self.provisioning.jobs, self.max_workers)

    @property
    def bringing(self) -> bool:
        """A machine of it is coming or may be asked for: a request of it is under way, or
        it neither rests after a failure, nor is paused, nor is at its cap."""
        state = self.provisioning
        return state.under_way or (
            state.resting_until is None and not state.paused and not self.at_cap
        )

    @property
    def can_grow(self) -> bool:
        """Another request may go out: none is pending, the profile neither rests nor is
        paused, and it is not at its cap."""
        return not self.outstanding and not self.at_cap


class Placement(NamedTuple):
    """Run request ``request_id`` on ``worker_id`` (``ENGINE_ID`` for the engine).

    ``gpu_ids`` become ``CUDA_VISIBLE_DEVICES``; ``threads`` caps the numerical libraries'
    thread pools (None: leave them alone, the place did not report its cores). A
    NamedTuple, like ``Amounts``: one is made per placement, thousands in a cold pass.
    """

    request_id: str
    worker_id: str
    gpu_ids: tuple[int, ...]
    threads: int | None
    cpus: int
    gpus: int
    ram_mb: int
    job_limit: float | None = None
    """Set only for a request that states no ``limit`` placed where a batch job ends: the
    time left in that job less the margin, which becomes the call's limit."""
    cached_bytes: int = 0
    """How many bytes of its inputs the place had cached: when more than none, what
    decided among the places that fit."""


@dataclass(frozen=True)
class ProvisionAsk:
    """Ask provisioner ``provisioner`` for one machine of ``profile``, on behalf of a request."""

    provisioner: str
    profile: str
    request_id: str


class WaitKind(enum.StrEnum):
    """Why a request waits, as a category the API and the Workers screen can group by."""

    NO_WORKER = "no_worker"
    """No attached worker carries the label, and no profile could add one."""
    BUSY = "busy"
    """Places that could run it exist, but none has what it needs free right now."""
    TOO_LARGE = "too_large"
    """No attached place and no profile is large enough: it cannot run as asked."""
    PROVISIONING = "provisioning"
    """A provisioner has been (or is now being) asked for a machine that fits."""
    WALLTIME = "walltime"
    """Places with the resources exist, but their batch jobs end before it could finish,
    and no profile's walltime is long enough."""


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


class Resources(NamedTuple):
    """A place's amounts as people read them: None where the place did not report one."""

    gpus: int | None
    cpus: int | None
    ram_mb: int | None
    slots: int


@dataclass(frozen=True)
class PlaceView:
    """A read-only look at one place: what it has, and what is free of it now."""

    id: str
    name: str
    labels: frozenset[str]
    inventory: Resources
    free: Resources
    paused: bool = False
    """Not answering for now, or stopping: it keeps what runs there, and is given nothing
    new."""
    cached: int = 0
    """How many artifacts its cache holds, as it last reported (``Scheduler.set_cached``)."""

    stopping: bool = False
    """Its worker said it is stopping: it is given nothing new again."""

    @property
    def calls(self) -> int:
        """The calls placed here and not yet ended: the slots in use."""
        return self.inventory.slots - self.free.slots
