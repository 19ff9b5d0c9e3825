"""What the run machine holds of each live run and node, and the snapshot it gives out.

Plain data: :class:`~fluksio.engine.runs.machine.run_machine.RunMachine` alone changes it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from fluksio.engine.runs.machine.ranges import Ranges
from fluksio.engine.runs.machine.references import Ref
from fluksio.engine.runs.machine.rows import ArraySummary, NodeRow, RunRow
from fluksio.wire.flows import NodeSpec

__all__ = ["EVENTS_KEPT", "LiveArray", "LiveNode", "LiveRun", "NodeSnapshot"]

EVENTS_KEPT = 100
"""The reported events a node keeps (the newest); the count says how many there were."""


@dataclass
class LiveNode:
    spec: NodeSpec
    row: NodeRow
    dependents: list[str] = field(default_factory=list)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=EVENTS_KEPT)
    )
    event_count: int = 0
    secrets: tuple[str, ...] = ()
    """Secret values released to the running call: blanked in what it reports."""
    retry_at: float | None = None
    """While it waits out a back-off before its next attempt (``pending``): until when."""
    item_params: dict[str, Any] | None = None
    """An array item's parameters (its row names the item)."""
    array: LiveArray | None = None
    """An array node's items in memory, once its turn has come."""
    cancelling: bool = False
    """An array's item cancelled on its own while it runs: it ends cancelled."""
    array_prefix: str = ""
    """An array node: what its items' call ids begin with (then their position)."""

    def note(self, event: str, now: float, **outputs: Any) -> None:
        """What the engine did to the node, among the events it shows (``retried``,
        ``rerun``)."""
        self.events.append({"event": event, "outputs": outputs, "ts": now})
        self.event_count += 1


@dataclass
class LiveArray:
    """What the machine holds of an array whose turn has come: its counts (the node
    row's own summary), where its source is read next, and the items in memory (in line,
    running, or waiting out a back-off), by position."""

    summary: ArraySummary
    cursor: int = 0
    exhausted: bool = False
    """Every item has been read from the source."""
    loading: bool = False
    """A :class:`~fluksio.engine.runs.machine.effects.Refill` is under way."""
    items: dict[int, LiveNode] = field(default_factory=dict)
    in_line: int = 0
    """How many of ``items`` are queued in the scheduler."""
    told_at: float = 0.0
    """When its counts were last written."""
    cancelled_ahead: Ranges = field(default_factory=Ranges)
    """Items cancelled on their own before they were read from the source, as ranges:
    passed over when they are (the ranges, written at the cancel, say so after a
    restart)."""


@dataclass
class LiveRun:
    row: RunRow
    nodes: dict[str, LiveNode]
    cancelling: bool = False
    unfinished: int = 0
    """How many nodes are not yet in a terminal state (kept by the machine's ``_end``)."""
    waiting_for: set[Ref] = field(default_factory=set)
    """The other runs' node results its parameters name that have not come yet: its
    nodes start once none is left."""
    given: dict[Ref, Any] = field(default_factory=dict)
    """Those results that came, by reference."""


@dataclass(frozen=True)
class NodeSnapshot:
    """One node of a live run as it stands: its row, the events its call reported (a
    copy) and how many, and its call id while queued."""

    row: NodeRow
    events: list[dict[str, Any]]
    event_count: int
    queued_call: str | None
    retry_at: float | None = None
    """While it waits out a back-off before its next attempt: until when."""
    most_attempts: int = 1
    """How many attempts its ``retry`` (or ``retries``) allows it, the first included."""
