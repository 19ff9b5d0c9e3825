"""What the scheduler knows of each place: capacity, what is allocated, what is held.

Internal to the package: the engine sees a place only as the :class:`~.model.Worker` it
reports, the :class:`~.model.Placement` it is handed and the read-only
:class:`~.model.PlaceView` it may ask for.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluksio.scheduler.model import ENGINE_ID, CallRequest, Worker
from fluksio.scheduler.resources import UNKNOWN, ZERO, Amounts, PlaceIndex, PlaceKey

__all__ = ["Allocation", "Group", "GroupKey", "PlaceState", "need_of"]

GroupKey = str | None
"""A label, or None for the engine's own group."""


def _amount(value: int | None) -> int:
    return UNKNOWN if value is None else value


def need_of(request: CallRequest) -> Amounts:
    """What a request takes: its GPUs, cores and memory (0 when not asked) and one slot."""
    return Amounts(request.gpus or 0, request.cpus or 0, request.ram_mb or 0, 1)


@dataclass(frozen=True)
class Allocation:
    """Exactly what a placement took, so that release gives back exactly that."""

    place_id: str
    taken: Amounts
    gpu_ids: tuple[int, ...]


class PlaceState:
    """One place's capacity and its allocated and held (reserved) amounts."""

    __slots__ = ("capacity", "free_gpu_ids", "groups", "held", "paused", "used", "worker")

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.capacity = Amounts(
            _amount(worker.gpus), _amount(worker.cpus), _amount(worker.ram_mb), worker.slots
        )
        self.used = ZERO
        self.held = ZERO
        self.paused = False
        """Not answering for now: it keeps what runs there, and is given nothing new."""
        self.free_gpu_ids = sorted(worker.device_ids)
        self.groups: tuple[GroupKey, ...] = (
            (None,) if worker.id == ENGINE_ID else tuple(sorted(worker.labels))
        )

    @property
    def id(self) -> str:
        return self.worker.id

    def known(self, need: Amounts) -> Amounts:
        """``need`` with the amounts this place did not report zeroed: nothing is taken there."""
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
        c, u, h = self.capacity, self.used, self.held
        return Amounts(
            c.gpus if c.gpus == UNKNOWN else max(0, c.gpus - u.gpus - h.gpus),
            c.cpus if c.cpus == UNKNOWN else max(0, c.cpus - u.cpus - h.cpus),
            c.ram_mb if c.ram_mb == UNKNOWN else max(0, c.ram_mb - u.ram_mb - h.ram_mb),
            max(0, c.slots - u.slots - h.slots),
        )

    def unheld(self) -> Amounts:
        """Capacity less holds: what could run here once the running calls end."""
        return self.capacity.minus(self.held)

    def free_key(self) -> PlaceKey:
        return PlaceKey(*self.free(), self.worker.id)

    def capacity_key(self) -> PlaceKey:
        return PlaceKey(*self.capacity, self.worker.id)

    def threads_for(self, need: Amounts) -> int | None:
        """Thread cap for a call: its cores if it asked, else a fair share of the place's."""
        if need.cpus > 0:
            return need.cpus
        if self.capacity.cpus == UNKNOWN:
            return None
        return max(1, self.capacity.cpus // max(1, self.capacity.slots))


class Group:
    """The places carrying one label (or the engine): free amounts and whole capacities."""

    __slots__ = ("capacity", "free", "members")

    def __init__(self) -> None:
        self.free = PlaceIndex()
        self.capacity = PlaceIndex()
        self.members: set[str] = set()
