"""A run and its nodes as they are stored: plain rows, shared by the machine and the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fluksio.wire.provenance import Provenance
from fluksio.wire.states import NodeState, RunState

__all__ = ["ArraySummary", "NodeRow", "RunRow"]


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
    item: int | None = None
    """An array's item: its position among the array's items (``node_id`` names the
    array). None: a node."""
    array: ArraySummary | None = None
    """An array node's items, counted by state."""

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
