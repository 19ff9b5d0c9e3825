"""A run and its nodes as they are stored: plain rows, shared by the machine and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.engine.workers.connection.holder import Holder
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import NodeState, RunState

__all__ = ["ArraySummary", "HeldItem", "NodeRow", "RunRow"]


@dataclass
class ArraySummary:
    """An array's items counted by state, and the first that failed."""

    total: int
    counts: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    """The first failed items (``item``, ``error``), a few."""

    def to_json(self) -> dict[str, Any]:
        return {"total": self.total, "counts": dict(self.counts), "failures": list(self.failures)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArraySummary:
        return cls(data["total"], dict(data["counts"]), list(data.get("failures", [])))


@dataclass
class NodeRow:
    node_id: str
    state: NodeState
    call_id: str | None = None
    place: str | None = None
    queued_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    logs: str = ""
    events: list[dict[str, Any]] | None = None
    provenance: Provenance | None = None
    """Where it ran (set when it starts)."""
    attempt: int = 1
    """Which attempt it is on (or ended on): 1, then one more at each retry."""
    interruptions: int = 0
    """Attempts begun again after a stop not of its doing (its job's end), which spent no
    retry: of its attempts, ``attempt - 1 - interruptions`` were retries."""
    crashes: tuple[str, ...] = ()
    """Where its worker died under it, one entry per time (``hpc-small in Slurm job 41``),
    counted against the engine's ``crash_limit``."""
    checkpoint: ArtifactRef | None = None
    """The artifact reference of the state its call last saved (``fluksio.checkpoint``):
    every later attempt is given it back (``fluksio.restored()``)."""
    item: int | None = None
    """An array's item: its position among the array's items (``node_id`` names the
    array). None: a node."""
    array: ArraySummary | None = None
    """An array node's items, counted by state."""
    holder: Holder | None = None
    """Who holds its call where it runs (a worker's token, name and process): a restarted
    engine gives the call back to that worker alone. None: the engine's own process, not
    placed, or a row written before holders were."""

    @property
    def sent_ahead(self) -> bool:
        """Its call went to a worker that took it ahead of a free slot (``--pipeline``)
        and has not started it: running, with no ``started_at`` until it starts."""
        return self.state is NodeState.RUNNING and self.started_at is None


@dataclass
class RunRow:
    id: str
    flow: str
    spec: dict[str, Any]
    params: dict[str, Any]
    state: RunState
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None


class Earlier(NamedTuple):
    """An item as its row left it: its state and how its attempts were spent (those of
    :class:`~fluksio.engine.runs.machine.rows.NodeRow`)."""

    state: str | None
    attempt: int
    interruptions: int
    crashes: tuple[str, ...]
    checkpoint: ArtifactRef | None


HeldItem = tuple[NodeRow, dict[str, Any]]
"""An array's item a restart found running on a worker: its row, and its parameters (read
again from its source), to await that worker with."""
