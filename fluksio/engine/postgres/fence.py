"""What each write of the active engine of several checks: the lease's epoch is still its
own (see :mod:`fluksio.engine.postgres.lease`). Apart from the lease, because the engine
holds a fence while it runs, and needs no driver for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fluksio.errors import StoreAway

__all__ = ["Fence", "Fenced"]


class Fenced(StoreAway):
    """A write of an engine whose lease another engine holds now: nothing was written."""


class Fence:
    """What each write of the active engine checks: the lease's epoch is still its own."""

    CHECK = "SELECT epoch, address FROM engine_lease WHERE id = 1 FOR SHARE"

    def __init__(self, epoch: int, on_fenced: Callable[[str], None]) -> None:
        self.epoch = epoch
        self._on_fenced = on_fenced

    def refused(self, row: Mapping[str, Any] | None) -> Fenced | None:
        """The refusal of a write that found ``row`` as the lease, or None to go on."""
        if row is not None and int(row["epoch"]) == self.epoch:
            return None
        now_at = "nobody" if row is None else f"the engine at {row['address']}"
        said = (
            f"this engine's lease (epoch {self.epoch}) is {now_at}'s now: it wrote nothing"
            " and steps down"
        )
        self._on_fenced(said)
        return Fenced(said)
