"""Ended runs older than the retention age are deleted, and the artifacts nobody needs.

Every ``prune_every_s`` the dispatcher (its own timer: what it forgets and what the store
deletes go together) deletes the runs that ended more than ``keep_runs_s`` ago,
:data:`BATCH` to a transaction and yielding to the event loop between them, so that calls
are never held up by more than one small transaction. Once some went, the artifact store
is swept: an object that no kept run or flow mentions (parameters, results, events), that
is older than the retention age too, and older than every call in flight (one of those
may have saved it without a result naming it yet), is removed. SQLite keeps the pages the
deleted rows freed and writes new rows into them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from fluksio.engine.artifacts import ArtifactStore
from fluksio.engine.runs.store import FlowStore, RunStore
from fluksio.logs import get_logger

__all__ = ["BATCH", "prune_once"]

log = get_logger(__name__)
BATCH = 100
"""Runs deleted in one transaction."""


async def prune_once(
    runs: RunStore,
    artifacts: ArtifactStore,
    flows: FlowStore,
    *,
    keep_s: float,
    now: float,
    forget_runs: Callable[[Sequence[str]], None],
    oldest_call_started: Callable[[float], float],
) -> None:
    """Delete what the retention age says is due now: ended runs, then the transient
    flows (the Python executor's) no kept run is of, then what no one refers to."""
    cutoff = now - keep_s
    deleted = 0
    while True:
        ids = runs.delete_ended_before(cutoff, BATCH)
        forget_runs(ids)
        deleted += len(ids)
        if len(ids) < BATCH:
            break
        await _one_turn()  # what else is ready (calls, requests) goes first
    flows_deleted = flows.delete_transient_before(cutoff)
    if deleted or flows_deleted:
        referenced = runs.referenced_digests()
        older_than = min(cutoff, oldest_call_started(now))
        loop = asyncio.get_running_loop()
        removed = await loop.run_in_executor(
            None, artifacts.remove_unreferenced, referenced, older_than
        )
        log.info(
            "runs.pruned",
            runs=deleted,
            flows=flows_deleted,
            artifacts=removed,
            ended_before=cutoff,
        )


async def _one_turn() -> None:
    """Let the event loop run everything ready once (not a wait on any clock)."""
    loop = asyncio.get_running_loop()
    turn: asyncio.Future[None] = loop.create_future()
    loop.call_soon(turn.set_result, None)
    await turn
