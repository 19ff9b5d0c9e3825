"""What the scheduler knows of each place: capacity, what is allocated, what is held.

Internal to the package; the engine sees places only through :class:`~.model.Worker`
going in and :class:`~.model.Placement` coming out.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluksio.scheduler.model import ENGINE_ID, CallRequest, Worker
from fluksio.scheduler.resources import UNKNOWN, PlaceIndex, Vector

__all__ = ["Allocation", "Group", "GroupKey", "PlaceState", "need_of"]

GroupKey = str | None
"""A label, or None for the engine's own group."""


def _amount(value: int | None) -> int:
    return UNKNOWN if value is None else value


def need_of(request: CallRequest) -> Vector:
    """What a request takes: its GPUs, cores and memory (0 when not asked) and one slot."""
    return (request.gpus or 0, request.cpus or 0, request.ram_mb or 0, 1)


@dataclass(frozen=True)
class Allocation:
    """Exactly what a placement took, so that release gives back exactly that."""

    place_id: str
    taken: Vector
    gpu_ids: tuple[int, ...]


class PlaceState:
    """One place's capacity and its allocated and held (reserved) amounts."""

    __slots__ = ("capacity", "free_gpu_ids", "groups", "held", "used", "worker")

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.capacity: Vector = (
            _amount(worker.gpus),
            _amount(worker.cpus),
            _amount(worker.ram_mb),
            worker.slots,
        )
        self.used = [0, 0, 0, 0]
        self.held = [0, 0, 0, 0]
        self.free_gpu_ids = sorted(worker.device_ids)
        self.groups: tuple[GroupKey, ...] = (
            (None,) if worker.id == ENGINE_ID else tuple(sorted(worker.labels))
        )

    @property
    def id(self) -> str:
        return self.worker.id

    def known(self, need: Vector) -> Vector:
        """``need`` with the amounts this place did not report zeroed: nothing is taken there."""
        c = self.capacity
        return (
            0 if c[0] == UNKNOWN else need[0],
            0 if c[1] == UNKNOWN else need[1],
            0 if c[2] == UNKNOWN else need[2],
            need[3],
        )

    def free(self) -> Vector:
        """Capacity less allocations less holds, never below zero; unknown stays unknown.

        A hold is taken against capacity, so it may exceed what is free now; a request
        that asks none of that resource must not be turned away by it.
        """
        c, u, h = self.capacity, self.used, self.held
        return (
            c[0] if c[0] == UNKNOWN else max(0, c[0] - u[0] - h[0]),
            c[1] if c[1] == UNKNOWN else max(0, c[1] - u[1] - h[1]),
            c[2] if c[2] == UNKNOWN else max(0, c[2] - u[2] - h[2]),
            max(0, c[3] - u[3] - h[3]),
        )

    def unheld(self) -> Vector:
        """Capacity less holds: what could run here once the running calls end."""
        c, h = self.capacity, self.held
        return (c[0] - h[0], c[1] - h[1], c[2] - h[2], c[3] - h[3])

    def free_key(self) -> tuple[int, int, int, int, str]:
        return (*self.free(), self.worker.id)

    def capacity_key(self) -> tuple[int, int, int, int, str]:
        return (*self.capacity, self.worker.id)

    def threads_for(self, need: Vector) -> int | None:
        """Thread cap for a call: its cores if it asked, else a fair share of the place's."""
        if need[1] > 0:
            return need[1]
        if self.capacity[1] == UNKNOWN:
            return None
        return max(1, self.capacity[1] // max(1, self.capacity[3]))


class Group:
    """The places carrying one label (or the engine): free amounts and whole capacities."""

    __slots__ = ("capacity", "free", "members")

    def __init__(self) -> None:
        self.free = PlaceIndex()
        self.capacity = PlaceIndex()
        self.members: set[str] = set()
