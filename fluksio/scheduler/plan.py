"""What one pass reads and decides, as plain frozen data: the snapshot and the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fluksio.scheduler.model import CallRequest, Placement, Profile, ProvisionAsk, Worker
from fluksio.scheduler.state import Allocation

__all__ = ["DEFAULT_WALLTIME_MARGIN_S", "Plan", "Snapshot"]

DEFAULT_WALLTIME_MARGIN_S = 60.0
"""Time to spare between a call's limit and its worker's job end (it starts, reports)."""


@dataclass(frozen=True)
class Plan:
    """What one pass decided: start these, ask for these, and who holds what."""

    placements: tuple[Placement, ...]
    asks: tuple[ProvisionAsk, ...]
    holds: Mapping[str, str]
    """request id -> the place it holds a reservation on, for this pass (read-only, like
    the rest of the plan: a caller cannot change what the pass decided)."""

    def __post_init__(self) -> None:
        if not isinstance(self.holds, MappingProxyType):
            object.__setattr__(self, "holds", MappingProxyType(dict(self.holds)))


@dataclass(frozen=True)
class Snapshot:
    """Everything a pass depends on, as plain frozen data.

    ``targets`` are the places requests held last pass (a hold is kept where it can be,
    so that a waiting request is not moved from machine to machine).
    """

    places: tuple[Worker, ...]
    running: tuple[tuple[CallRequest, Allocation], ...]
    waiting: tuple[CallRequest, ...]
    profiles: tuple[Profile, ...] = ()
    targets: tuple[tuple[str, str], ...] = ()
    paused: tuple[str, ...] = ()
    """Places not answering for now: nothing new is placed there."""
    now: float | None = None
    """The time of the pass (what walltimes are counted from)."""
    walltime_margin_s: float = DEFAULT_WALLTIME_MARGIN_S
    cached: tuple[tuple[str, frozenset[str]], ...] = ()
    """What each place reports its cache holds (digests), where it holds any."""
    images: tuple[tuple[str, frozenset[str]], ...] = ()
    """The container images each place holds ready, where it holds any."""
