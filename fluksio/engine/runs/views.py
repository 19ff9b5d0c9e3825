"""What the dispatcher shows of runs: plain, read-only records for routes, feed and metrics."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from fluksio.agent.launcher import CallOutcome
from fluksio.agent.protocol.frames import RunFrame
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.workers.connection.holder import Holder
from fluksio.engine.workers.session_effects import EventCallback
from fluksio.scheduler import WaitReason
from fluksio.wire.provenance import Provenance

__all__ = [
    "Executor",
    "NodeView",
    "Resumable",
    "RunChange",
    "RunView",
    "WaitingCall",
    "stored_view",
    "waiting_to_retry",
]


class RunChange(NamedTuple):
    """What one write recorded of a run: its row, the nodes that changed, and whether the
    run itself is new or changed state."""

    row: RunRow
    nodes: Sequence[NodeRow]
    run_changed: bool


@dataclass(frozen=True)
class NodeView:
    """One node of a run as a client sees it; ``reason`` only while it is queued."""

    row: NodeRow
    reason: str | None
    event_count: int
    events: list[dict[str, Any]] | None = None
    """The events its call reported (the newest kept), while its run is live: the row
    holds them only once the call ended."""


@dataclass(frozen=True)
class RunView:
    row: RunRow
    nodes: tuple[NodeView, ...]


def stored_view(row: RunRow, nodes: Sequence[NodeRow]) -> RunView:
    """A run as the store holds it (an ended one's events are in its rows)."""
    return RunView(row, tuple(NodeView(n, None, len(n.events or [])) for n in nodes))


def waiting_to_retry(row: NodeRow, most: int, retry_at: float, now: float) -> str:
    """Why a node waits out its back-off: ``attempt 2 of 4 in 5 s; attempt 1 ended
    NodeTimeout: ...``."""
    error = row.error or {}
    said = error.get("short") or error.get("type") or "failed"
    left = max(0.0, retry_at - now)
    return (
        f"attempt {row.attempt} of {most} in {left:.0f} s; attempt {row.attempt - 1} ended {said}"
    )


@dataclass(frozen=True)
class WaitingCall:
    """A queued node call, with why it waits."""

    call_id: str
    run_id: str
    flow: str
    node: str
    worker: str | None
    queued_at: float | None
    reason: WaitReason | None
    items: int | None = None
    """An array: how many of its items wait (this call is the first of them in line)."""


class Executor(Protocol):
    """Where calls placed on one place run: the engine's launcher, or a worker's socket."""

    @property
    def labels(self) -> frozenset[str]:
        """The labels signed for this place (empty for the engine): which secrets it gets."""
        ...

    def call_env(self, call_id: str) -> dict[str, str]:
        """Variables call ``call_id`` on this place needs (where its artifacts go, and its
        own credential to save them with)."""
        ...

    def provenance(self) -> Provenance:
        """Where calls placed here run (the GPUs are the placement's to add)."""
        ...

    def holder(self) -> Holder | None:
        """Who holds calls placed here across the engine's restart; None: none outlive
        the engine."""
        ...

    async def run(self, spec: RunFrame, on_event: EventCallback) -> CallOutcome: ...

    def cancel(self, call_id: str) -> bool: ...


class Resumable(Executor, Protocol):
    """A place whose calls may outlive the engine (a worker's socket, our agent's)."""

    def adopt(self, call_id: str, on_event: EventCallback) -> Awaitable[CallOutcome]:
        """Take over a call already running there, which its worker's hello named: its
        frames are told to ``on_event`` from now on, and the awaitable is its outcome.
        Expected at once, before anything more is read from the worker."""
        ...
