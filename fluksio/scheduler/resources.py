"""Resource vectors, and the sorted indexes that find a best fit without scanning every place.

A vector is ``(gpus, cpus, ram_mb, slots)``: GPUs first because they are the scarcest and
the order of this tuple *is* the best-fit rule (see :class:`FreeIndex`). An unknown amount
on a place is :data:`UNKNOWN`, larger than any request, so it never constrains.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable

__all__ = [
    "DIMENSIONS",
    "UNKNOWN",
    "PlaceIndex",
    "Vector",
    "covers",
]

Vector = tuple[int, int, int, int]
DIMENSIONS = ("gpus", "cpus", "ram_mb", "slots")
UNKNOWN = 1 << 62
"""Stands for an amount the place did not report: enough for any request."""

Key = tuple[int, int, int, int, str]


def covers(available: Vector, need: Vector) -> bool:
    return (
        available[0] >= need[0]
        and available[1] >= need[1]
        and available[2] >= need[2]
        and available[3] >= need[3]
    )


def _first(keys: list[Key], need: Vector, accept: Callable[[Key], bool]) -> Key | None:
    """The smallest key that covers ``need`` and that ``accept`` takes.

    Keys sort by GPUs, then cores, so every key before ``(need gpus, need cpus)`` lacks one
    of them; within one GPU level, keys short of cores are jumped over by bisection.
    """
    gpus, cpus, ram, slots = need
    position = bisect_left(keys, (gpus, cpus))
    end = len(keys)
    while position < end:
        key = keys[position]
        if key[1] < cpus:
            position = bisect_left(keys, (key[0], cpus), position)
            continue
        if key[2] >= ram and key[3] >= slots and accept(key):
            return key
        position += 1
    return None


def _accept_all(_key: Key) -> bool:
    return True


class PlaceIndex:
    """Places sorted by a vector of theirs (what is free, or their whole capacity).

    Used with free amounts it answers *best fit*: among places whose free amounts cover
    the request, the one with the fewest free GPUs, then the fewest free cores, then the
    least free memory, then the fewest free slots, then the smallest id. GPU-less work
    therefore lands on GPU-less places first, and a large machine is the last to be
    carved up. Used with capacities it answers *who could ever run this*.
    """

    def __init__(self) -> None:
        self._keys: list[Key] = []

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: Key) -> None:
        insort(self._keys, key)

    def discard(self, key: Key) -> None:
        position = bisect_left(self._keys, key)
        if position < len(self._keys) and self._keys[position] == key:
            del self._keys[position]

    def first(self, need: Vector, accept: Callable[[Key], bool] = _accept_all) -> str | None:
        """The id of the first place (in index order) covering ``need`` that ``accept`` takes."""
        key = _first(self._keys, need, accept)
        return None if key is None else key[4]
