"""A run and its nodes as they are stored: plain rows, shared by the machine and the store."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluksio.engine.runs.provenance import Provenance
from fluksio.engine.runs.states import NodeState, RunState

__all__ = ["NodeRow", "RunRow"]


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
