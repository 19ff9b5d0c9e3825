"""A first-come-first-served queue of request keys with a cheap head, kept sorted."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator

__all__ = ["QueueKey", "ShapeQueue"]

QueueKey = tuple[float, str]
"""``(queued_at, request id)``: the order of service; the id breaks ties."""


class ShapeQueue:
    """Sorted keys with an advancing head, so taking the head costs nothing.

    Consumed keys stay in the list before ``_start`` until they are half of it, then are
    dropped in one slice: amortised constant time per pop, no O(n) shift each time.
    """

    __slots__ = ("_items", "_start")

    def __init__(self) -> None:
        self._items: list[QueueKey] = []
        self._start = 0

    def __len__(self) -> int:
        return len(self._items) - self._start

    def __iter__(self) -> Iterator[QueueKey]:
        return iter(self._items[self._start :])

    def head(self) -> QueueKey:
        return self._items[self._start]

    def push(self, key: QueueKey) -> None:
        insort(self._items, key, lo=self._start)

    def pop_head(self) -> QueueKey:
        key = self._items[self._start]
        self._start += 1
        if self._start > 32 and self._start * 2 > len(self._items):
            del self._items[: self._start]
            self._start = 0
        return key

    def remove(self, key: QueueKey) -> bool:
        position = bisect_left(self._items, key, lo=self._start)
        if position < len(self._items) and self._items[position] == key:
            del self._items[position]
            return True
        return False
