"""Amounts of resources, and the sorted indexes that find a best fit without scanning.

:class:`Amounts` is ``(gpus, cpus, ram_mb, slots)``: GPUs first because they are the
scarcest, and the order of its fields *is* the best-fit rule (see :class:`PlaceIndex`).
An unknown amount on a place is :data:`UNKNOWN`, larger than any request, so it never
constrains. Internal to the package: the engine sees :class:`~.model.Resources`.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator
from typing import NamedTuple

__all__ = ["RESOURCES", "UNKNOWN", "ZERO", "Amounts", "PlaceIndex", "PlaceKey", "covers"]

UNKNOWN = 1 << 62
"""Stands for an amount the place did not report: enough for any request."""


class Amounts(NamedTuple):
    """Whole amounts of each resource; on a place, :data:`UNKNOWN` where not reported."""

    gpus: int
    cpus: int
    ram_mb: int
    slots: int

    def plus(self, other: Amounts) -> Amounts:
        return Amounts(
            self.gpus + other.gpus,
            self.cpus + other.cpus,
            self.ram_mb + other.ram_mb,
            self.slots + other.slots,
        )

    def minus(self, other: Amounts) -> Amounts:
        return Amounts(
            self.gpus - other.gpus,
            self.cpus - other.cpus,
            self.ram_mb - other.ram_mb,
            self.slots - other.slots,
        )


ZERO = Amounts(0, 0, 0, 0)
RESOURCES = ("gpus", "cpus", "ram_mb")
"""The resources a request asks amounts of (every call also takes one slot)."""


class PlaceKey(NamedTuple):
    """A place in an index: its amounts (free, or whole capacity), then its id."""

    gpus: int
    cpus: int
    ram_mb: int
    slots: int
    place_id: str


def covers(available: Amounts, need: Amounts) -> bool:
    gpus, cpus, ram_mb, slots = available
    need_gpus, need_cpus, need_ram_mb, need_slots = need
    return gpus >= need_gpus and cpus >= need_cpus and ram_mb >= need_ram_mb and slots >= need_slots


def _first(
    keys: list[PlaceKey], need: Amounts, accept: Callable[[PlaceKey], bool], start: int = 0
) -> int:
    """The position of the smallest key from ``start`` on that covers ``need`` and that
    ``accept`` takes; ``len(keys)`` when there is none.

    Keys sort by GPUs, then cores, so every key before ``(need gpus, need cpus)`` lacks one
    of them; within one GPU level, keys short of cores are jumped over by bisection.
    """
    gpus, cpus, ram, slots = need
    position = bisect_left(keys, (gpus, cpus), start)
    end = len(keys)
    while position < end:
        key = keys[position]
        if key.cpus < cpus:
            position = bisect_left(keys, (key.gpus, cpus), position)
            continue
        if key.ram_mb >= ram and key.slots >= slots and accept(key):
            return position
        position += 1
    return end


def _covering(
    keys: list[PlaceKey], need: Amounts, accept: Callable[[PlaceKey], bool]
) -> Iterator[PlaceKey]:
    """Every key that covers ``need`` and that ``accept`` takes, in index order."""
    position = _first(keys, need, accept)
    while position < len(keys):
        yield keys[position]
        position = _first(keys, need, accept, position + 1)


def _accept_all(_key: PlaceKey) -> bool:
    return True


class PlaceIndex:
    """Places sorted by amounts of theirs (what is free, or their whole capacity).

    Used with free amounts it answers *best fit*: among places whose free amounts cover
    the request, the one with the fewest free GPUs, then the fewest free cores, then the
    least free memory, then the fewest free slots, then the smallest id. GPU-less work
    therefore lands on GPU-less places first, and a large machine is the last to be
    carved up. Used with capacities it answers *who could ever run this*.
    """

    def __init__(self) -> None:
        self._keys: list[PlaceKey] = []

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: PlaceKey) -> None:
        insort(self._keys, key)

    def discard(self, key: PlaceKey) -> None:
        position = bisect_left(self._keys, key)
        if position < len(self._keys) and self._keys[position] == key:
            del self._keys[position]

    def first(self, need: Amounts, accept: Callable[[PlaceKey], bool] = _accept_all) -> str | None:
        """The id of the first place (in index order) covering ``need`` that ``accept`` takes."""
        position = _first(self._keys, need, accept)
        return None if position == len(self._keys) else self._keys[position].place_id

    def covering(
        self, need: Amounts, accept: Callable[[PlaceKey], bool] = _accept_all
    ) -> Iterator[PlaceKey]:
        """Every place covering ``need`` that ``accept`` takes, in index order (best fit
        first); the index must not change while this is read."""
        return _covering(self._keys, need, accept)
