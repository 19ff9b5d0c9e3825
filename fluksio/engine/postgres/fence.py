"""What each write of the active engine of several checks: the lease's epoch is still its
own (see :mod:`fluksio.engine.postgres.lease`). Apart from the lease, because the engine
holds a fence while it runs, and needs no driver for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fluksio.agent.realtime import realtime_monotonic
from fluksio.errors import StoreAway

__all__ = ["Fence", "Fenced"]


class Fenced(StoreAway):
    """A write of an engine whose lease another engine holds now: nothing was written."""


class Fence:
    """What each write of the active engine checks: the lease's epoch is still its own."""

    CHECK = "SELECT epoch, address FROM engine_lease WHERE id = 1 FOR SHARE"

    def __init__(self, epoch: int, on_fenced: Callable[[str], None], held_until: float) -> None:
        self.epoch = epoch
        self._on_fenced = on_fenced
        self.held_until = held_until
        """Until when the lease is surely this engine's, on the real monotonic clock: moved
        on by each renewal. Past it, another engine may hold it (a pause the engine
        cannot see)."""

    def renewed(self, held_until: float) -> None:
        self.held_until = held_until

    def refused(self, row: Mapping[str, Any] | None) -> Fenced | None:
        """The refusal of a write that found ``row`` as the lease, or None to go on. Also
        refused past :attr:`held_until`: what follows a write (a job submitted) must not
        happen after another engine may have taken over."""
        if row is not None and int(row["epoch"]) == self.epoch:
            if realtime_monotonic() <= self.held_until:
                return None
            return self._refuse("ran out by its own clock before this write: it was paused")
        now_at = "nobody" if row is None else f"the engine at {row['address']}"
        return self._refuse(f"is {now_at}'s now")

    def _refuse(self, how: str) -> Fenced:
        said = f"this engine's lease (epoch {self.epoch}) {how}; it wrote nothing and steps down"
        self._on_fenced(said)
        return Fenced(said)
