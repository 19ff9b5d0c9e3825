"""A run and its nodes, as ``GET /runs/{id}`` shows them, and the list's summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fluksio.wire.answers.base import Answer
from fluksio.wire.states import NodeState, RunState


class ProvenanceBody(Answer):
    """Where a node call ran."""

    worker: str
    """The worker's display name; ``engine`` for calls on the engine."""
    host: str | None
    slurm_job_id: str | None
    batch_job: str | None = None
    """The batch job of the request that brought the worker (``"Grid Engine job 12"``);
    null for a worker no provisioner brought, and in records written before it was kept."""
    gpu_ids: list[int]
    provisioner: str | None
    """``provisioner/profile`` of the request that brought the worker, if one did."""
    request_id: str | None
    cached_bytes: int = 0
    """Bytes of the call's input artifacts the worker's cache held when it was placed:
    when more than none, what chose this worker among those that fit."""


class ArrayBody(Answer):
    """An array node's items, counted."""

    total: int
    counts: dict[str, int]
    """How many items are in each state (``queued`` includes those waiting to retry)."""
    failures: list[dict[str, Any]]
    """The first items that failed: ``item`` (its position) and ``error``."""


class NodeBody(Answer):
    id: str
    state: NodeState
    reason: str | None
    """Why it waits: while it is queued, waits to retry, or is sent ahead."""
    ran_on: str | None
    provenance: ProvenanceBody | None
    """Where it ran, once it started."""
    queued_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    duration_s: float | None
    result: Any
    error: dict[str, Any] | None
    logs: str
    events: list[dict[str, Any]]
    event_count: int
    attempt: int = 1
    """Which attempt it is on, or ended on: 1, then one more at each retry (``retry``,
    ``retries``); each retry is an event ``retried`` saying why the last one ended."""
    attempts: int = 1
    """How many attempts its ``retry`` (or ``retries``) allows, the first included."""
    sent_ahead: bool = False
    """Running, but held by its worker ahead of a free slot (``--pipeline``): not started
    yet, so ``started_at`` and ``duration_s`` are null until it starts."""
    array: ArrayBody | None = None
    """An array node's items counted by state; each item is read by pages
    (``GET /runs/{id}/items``)."""


class RunBody(Answer):
    id: str
    flow: str
    state: RunState
    reason: str | None
    """Why the run has not started: the first waiting node's reason, while it is queued."""
    params: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    nodes: list[NodeBody]
    artifacts: list[dict[str, Any]]
    """Every artifact reference in the nodes' results, with the node it came from."""


class ItemBody(Answer):
    """One item of an array: a call of its own."""

    item: int
    """Its position among the array's items, from 0."""
    state: NodeState
    attempt: int
    ran_on: str | None
    provenance: ProvenanceBody | None
    started_at: datetime | None
    ended_at: datetime | None
    duration_s: float | None
    result: Any
    error: dict[str, Any] | None
    logs: str


class ItemsPage(Answer):
    """A page of an array's items, in order of position."""

    run_id: str
    node: str
    total: int
    items: list[ItemBody]
    next: int | None
    """Ask with ``after`` this for the next page; null: there is none."""


class RunSummary(Answer):
    id: str
    flow: str
    state: RunState
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


class NodeLogs(Answer):
    """A node's output from a position: the lines of one attempt, numbered from 0."""

    run_id: str
    node: str
    item: int | None = None
    """An array's item these lines are of, by position."""
    attempt: int
    """The attempt these lines are of."""
    latest_attempt: int
    """The node's attempt now: a follower moves on to the next once this one ``ended``."""
    state: NodeState
    """The node's state now."""
    first: int
    """The position of ``lines[0]`` (``from`` plus ``missed``)."""
    lines: list[str]
    missed: int
    """Lines after ``from`` and before ``first`` that cannot be had: passed over by the
    worker's rate bound, or fallen out of the engine's window on a long output."""
    next: int
    """Where to ask from next."""
    ended: bool
    """This attempt's output is complete: nothing will follow ``next``."""
    source: Literal["live", "stored"]
    """``live``: the lines kept while the call runs (and a while after); ``stored``: the
    node's stored record (its answer's ``logs``, 1 MiB at most: first and last halves)."""
