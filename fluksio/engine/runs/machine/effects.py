"""What the run machine asks of its owner: effects, carried out in the order given, and
what a placed call is given.

The dispatcher (:mod:`fluksio.engine.dispatch.dispatcher`) carries each out; the table
there says how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.workers.connection.holder import Holder
from fluksio.scheduler import CallRequest
from fluksio.wire.flows import NodeSpec

__all__ = [
    "AwaitWorker",
    "CallInputs",
    "CancelledAhead",
    "Create",
    "Effect",
    "Ended",
    "ItemsInterrupted",
    "Log",
    "Placing",
    "Progress",
    "Queue",
    "Recording",
    "Refill",
    "Release",
    "RetryAt",
    "Save",
    "Stop",
    "Withdraw",
]


@dataclass(frozen=True)
class Queue:
    """Put a call in the scheduler's queue."""

    request: CallRequest


@dataclass(frozen=True)
class Withdraw:
    """Take a waiting call out of the queue (its node was cancelled)."""

    call_id: str


@dataclass(frozen=True)
class Stop:
    """Ask the executor running the call to stop it; it ends as it will."""

    call_id: str


@dataclass(frozen=True)
class Release:
    """Give back what the ended call held on its place."""

    call_id: str


@dataclass(frozen=True)
class Create:
    """Write a new run and all its nodes, now: it exists from its first answer on."""

    row: RunRow
    nodes: tuple[NodeRow, ...]


@dataclass(frozen=True)
class Save:
    """Write these rows (as they are when written); ``run_changed`` when the run's own
    state changed too."""

    row: RunRow
    nodes: tuple[NodeRow, ...]
    run_changed: bool = False


@dataclass(frozen=True)
class Progress:
    """A running call reported an event; ``count`` is how many so far."""

    row: RunRow
    node: NodeRow
    count: int


@dataclass(frozen=True)
class Ended:
    """The run is over: write it now, then tell who waits for it."""

    row: RunRow


@dataclass(frozen=True)
class RetryAt:
    """A node (or an array's item) waits out its back-off: call
    :meth:`RunMachine.retry_due` at ``at``."""

    run_id: str
    node_id: str
    at: float
    item: int | None = None


@dataclass(frozen=True)
class Refill:
    """An array's line is short: read up to ``count`` of its items still to run, from
    position ``cursor`` on, and hand them to :meth:`RunMachine.refilled`."""

    run_id: str
    spec: NodeSpec
    cursor: int
    count: int
    total: int
    in_line: int = 0
    """How many of its items are in line already: the reader keeps the line's bytes
    bounded too (:data:`~fluksio.engine.runs.items.LINE_BYTES`), reading fewer."""


@dataclass(frozen=True)
class ItemsInterrupted:
    """A restart: the array's items stored as running were lost. Queue them again as a
    new attempt (``error`` None), or fail them with ``error``; with ``spare_held``, all but
    those on workers (a holder), which await their workers."""

    node: NodeRow
    run_id: str
    error: dict[str, Any] | None
    now: float
    spare_held: bool = False


@dataclass(frozen=True)
class CancelledAhead:
    """Items of an array cancelled before they were read: kept as ranges of positions
    (``(low, high)``, both included), never a row each."""

    run_id: str
    node_id: str
    ranges: tuple[tuple[int, int], ...]
    now: float


@dataclass(frozen=True)
class AwaitWorker:
    """A restart found the call running on worker ``worker`` (a place's name): it waits
    for the worker that holds it to come back naming it (:meth:`RunMachine.adopted`), or
    to be given up on (:meth:`RunMachine.not_back`). ``request`` is what it holds there once back,
    with the GPUs it was given."""

    request: CallRequest
    worker: str
    gpu_ids: tuple[int, ...]
    holder: Holder | None = None
    """Who holds it there; None: a row written before holders were, whose worker is known
    by its name alone."""


@dataclass(frozen=True)
class Log:
    """Something worth a line in the engine's log."""

    event: str
    fields: dict[str, Any]


# Two kinds, so that a shell carries each out in a place of its own: what moves a call
# between the queue and the places, and what the record and its readers are told.
Placing = Queue | Withdraw | Stop | Release | RetryAt | Refill | AwaitWorker
Recording = Create | Save | Progress | Ended | ItemsInterrupted | CancelledAhead | Log
Effect = Placing | Recording


@dataclass(frozen=True)
class CallInputs:
    """What a placed call is given: its node, the run's parameters and its dependencies'
    results (the owner adds the secrets it resolves)."""

    run: RunRow
    spec: NodeSpec
    params: dict[str, Any]
    results: dict[str, Any]
    attempt: int = 1
    """Which attempt of its node this call is."""
    item: dict[str, Any] | None = None
    """An array item's parameters (over the node's own)."""
    position: int | None = None
    """An array item's position."""
    restored: ArtifactRef | None = None
    """The state its node's call last saved (``fluksio.checkpoint``), to give back."""
