"""Positions held as ranges: an array's items cancelled before they were read.

Cancelling 980,000 unread items of a million held 980,000 positions (75 bytes each) and
wrote a row for each; what is cancelled together is mostly contiguous, so it is held, and
stored, as a few ``[low, high]`` ranges (both ends included).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

__all__ = ["Ranges", "runs_of"]


def runs_of(positions: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted distinct ``positions`` as the fewest ``(low, high)`` ranges."""
    found: list[tuple[int, int]] = []
    for position in sorted(set(positions)):
        if found and found[-1][1] + 1 == position:
            found[-1] = (found[-1][0], position)
        else:
            found.append((position, position))
    return found


class Ranges:
    """Disjoint ranges of positions, in order, merged as they are added."""

    def __init__(self) -> None:
        self._lows: list[int] = []
        self._highs: list[int] = []

    def __contains__(self, position: int) -> bool:
        at = bisect.bisect_right(self._lows, position) - 1
        return at >= 0 and position <= self._highs[at]

    def __len__(self) -> int:
        """How many positions they hold."""
        return sum(high - low + 1 for low, high in zip(self._lows, self._highs, strict=True))

    def spans(self) -> list[tuple[int, int]]:
        return list(zip(self._lows, self._highs, strict=True))

    def add(self, positions: Iterable[int]) -> list[tuple[int, int]]:
        """Hold ``positions`` too; the ranges of those not held before (what is new)."""
        new = runs_of(p for p in positions if p not in self)
        for low, high in new:
            self._merge(low, high)
        return new

    def drop_below(self, position: int) -> None:
        """Forget every position under ``position`` (read past: never asked again)."""
        cut = bisect.bisect_left(self._highs, position)
        del self._lows[:cut], self._highs[:cut]
        if self._lows and self._lows[0] < position:
            self._lows[0] = position

    def _merge(self, low: int, high: int) -> None:
        at = bisect.bisect_left(self._lows, low)
        if at > 0 and self._highs[at - 1] + 1 >= low:  # touches the one before
            at -= 1
            low = self._lows[at]
        end = at
        while end < len(self._lows) and self._lows[end] <= high + 1:
            high = max(high, self._highs[end])
            end += 1
        self._lows[at:end] = [low]
        self._highs[at:end] = [high]
