"""What the scheduler knows of each place: capacity, what is allocated, what is held.

Internal to the package: the engine sees a place only as the :class:`~.model.Worker` it
reports, the :class:`~.model.Placement` it is handed and the read-only
:class:`~.model.PlaceView` it may ask for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from fluksio.scheduler.model import (
    ENGINE_ID,
    CallRequest,
    Container,
    Policy,
    Profile,
    WaitKind,
    WaitReason,
    Worker,
)
from fluksio.scheduler.queues import ShapeQueue
from fluksio.scheduler.resources import UNKNOWN, ZERO, Amounts, PlaceIndex, PlaceKey

__all__ = [
    "Allocation",
    "Group",
    "GroupKey",
    "Inputs",
    "PlaceState",
    "SchedulerState",
    "Shape",
    "Verdict",
    "need_of",
    "shape_of",
]

GroupKey = str | None
"""A label, or None for the engine's own group."""
Inputs = tuple[tuple[str, int], ...]
"""A request's input artifacts: (digest, size in bytes)."""


def _amount(value: int | None) -> int:
    return UNKNOWN if value is None else value


def need_of(request: CallRequest) -> Amounts:
    """What a request takes: its GPUs, cores and memory (0 when not asked) and one slot."""
    return Amounts(request.gpus or 0, request.cpus or 0, request.ram_mb or 0, 1)


class Allocation(NamedTuple):
    """Exactly what a placement took, so that release gives back exactly that."""

    place_id: str
    taken: Amounts
    gpu_ids: tuple[int, ...]


class PlaceState:
    """One place's capacity and its allocated and held (reserved) amounts."""

    __slots__ = (
        "_capacity_key",
        "all_known",
        "cached",
        "capacity",
        "free_gpu_ids",
        "groups",
        "held",
        "images",
        "indexed",
        "paused",
        "stopping",
        "used",
        "worker",
    )

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.capacity = Amounts(
            _amount(worker.gpus),
            _amount(worker.cpus),
            _amount(worker.ram_mb),
            # A place that runs nothing (no slot) takes nothing ahead either.
            worker.slots + (worker.pipeline if worker.slots else 0),
        )
        """Its slots count the calls it takes ahead (``pipeline``): they are placed."""
        self.used = ZERO
        self.held = ZERO
        self.paused = False
        """Not answering for now, or stopping: it keeps what runs there, and is given
        nothing new."""
        self.stopping = False
        """Its worker said it is stopping (told to stop: a preemption, its job's end): it
        stays paused whether it answers or not."""
        self.free_gpu_ids = sorted(worker.device_ids)
        self.groups: tuple[GroupKey, ...] = (
            (None,) if worker.id == ENGINE_ID else tuple(sorted(worker.labels))
        )
        self.all_known = UNKNOWN not in self.capacity
        """It reported every amount: what a request needs is what it takes."""
        self.indexed: PlaceKey | None = None
        """The free key its groups' indexes hold it under, if they hold it."""
        self._capacity_key = PlaceKey(*self.capacity, worker.id)
        self.cached: frozenset[str] = frozenset()
        """The artifacts its cache holds, as it last reported (digests)."""
        self.images: frozenset[str] = frozenset()
        """The container images it holds ready, as it last reported."""

    @property
    def id(self) -> str:
        return self.worker.id

    def known(self, need: Amounts) -> Amounts:
        """``need`` with the amounts this place did not report zeroed: nothing is taken there."""
        if self.all_known:
            return need
        c = self.capacity
        return Amounts(
            0 if c.gpus == UNKNOWN else need.gpus,
            0 if c.cpus == UNKNOWN else need.cpus,
            0 if c.ram_mb == UNKNOWN else need.ram_mb,
            need.slots,
        )

    def free(self) -> Amounts:
        """Capacity less allocations less holds, never below zero; unknown stays unknown.

        A hold is taken against capacity, so it may exceed what is free now; a request
        that asks none of that resource must not be turned away by it.
        """
        return Amounts(*self._free())

    def _free(self) -> tuple[int, int, int, int]:
        # Conditional expressions, not max(): this is the scheduler's innermost step.
        # (UNKNOWN is a large positive number, so the clamp leaves it as it is.)
        c, u, h = self.capacity, self.used, self.held
        gpus = c.gpus if c.gpus == UNKNOWN else c.gpus - u.gpus - h.gpus
        cpus = c.cpus if c.cpus == UNKNOWN else c.cpus - u.cpus - h.cpus
        ram = c.ram_mb if c.ram_mb == UNKNOWN else c.ram_mb - u.ram_mb - h.ram_mb
        slots = c.slots - u.slots - h.slots
        return (
            gpus if gpus > 0 else 0,
            cpus if cpus > 0 else 0,
            ram if ram > 0 else 0,
            slots if slots > 0 else 0,
        )

    def unheld(self) -> Amounts:
        """Capacity less holds: what could run here once the running calls end."""
        return self.capacity.minus(self.held)

    def cached_bytes(self, inputs: Inputs) -> int:
        """How many bytes of ``inputs`` its cache holds."""
        cached = self.cached
        return sum(size for digest, size in inputs if digest in cached) if cached else 0

    def runs_now(self) -> bool:
        """A call placed here now starts at once (a slot is free, not only its pipeline)."""
        return self.used.slots + self.held.slots < self.worker.slots

    def free_key(self) -> PlaceKey:
        gpus, cpus, ram_mb, slots = self._free()  # no Amounts made only to be unpacked
        return PlaceKey(gpus, cpus, ram_mb, slots, self.worker.id)

    def capacity_key(self) -> PlaceKey:
        return self._capacity_key  # a capacity never changes

    def threads_for(self, need: Amounts) -> int | None:
        """Thread cap for a call: its cores if it asked, else a fair share of the place's."""
        if need.cpus > 0:
            return need.cpus
        if self.capacity.cpus == UNKNOWN:
            return None
        return max(1, self.capacity.cpus // max(1, self.worker.slots))


class Group:
    """The places carrying one label (or the engine): free amounts and whole capacities."""

    __slots__ = ("capacity", "free", "members")

    def __init__(self) -> None:
        self.free = PlaceIndex()
        self.capacity = PlaceIndex()
        self.members: set[str] = set()


Shape = tuple[str | None, Policy, Amounts, float | None, Container | None]
"""Requests alike in label, policy, amounts, limit and container: they are served strictly
in order."""


def shape_of(request: CallRequest) -> Shape:
    return (request.label, request.policy, need_of(request), request.limit, request.container)


class Verdict(NamedTuple):
    """Why a shape stopped in the last pass; rendered into text only when asked (one is
    made per waiting shape per pass: a NamedTuple, cheap to make)."""

    kind: WaitKind
    group: GroupKey
    holder: str | None = None
    held_on: str | None = None
    profile: str | None = None


@dataclass
class SchedulerState:
    """What the scheduler holds, named once: the :class:`~.scheduler.Scheduler` owns it
    and its parts (:class:`~.holds.Holds`, :class:`~.answers.Answers`) are given it."""

    margin: float
    """The walltime margin: what a place whose job ends keeps to spare."""
    profiles: dict[str, Profile]
    now: float | None = None
    """The time of the last pass."""
    places: dict[str, PlaceState] = field(default_factory=dict)
    groups: dict[GroupKey, Group] = field(default_factory=dict)
    capacity_fits: dict[tuple[GroupKey, Amounts], bool] = field(default_factory=dict)
    """Whether a group's whole capacity could ever hold a need: asked for every blocked
    request on every pass, and changed only when a place comes or goes."""
    queues: dict[Shape, ShapeQueue] = field(default_factory=dict)
    """The waiting requests by shape; a shape's queue goes when its last request does."""
    requests: dict[str, CallRequest] = field(default_factory=dict)
    running: dict[str, Allocation] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    """Where a waiting request held last: held there again if it still could."""
    held: set[str] = field(default_factory=set)
    """The places something is held on in this pass."""
    verdicts: dict[Shape, Verdict] = field(default_factory=dict)
    reason_cache: dict[tuple[Shape, bool], WaitReason] = field(default_factory=dict)
    # How many places have a job end, take calls ahead, report a cache or images holding
    # anything: while none does, time, slots ahead and inputs decide nothing.
    ending: int = 0
    pipelines: int = 0
    caching: int = 0
    imaging: int = 0
