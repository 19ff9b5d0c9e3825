"""Writes the run machine's rows to SQLite: a moment's changes in one transaction.

Rows are marked as they change and written together before the event loop waits for
anything again; but an array's items, on a busy engine, at most once every
:data:`FLUSH_SPACING_S`, the moments between gathered into one transaction (a fan-out's
items otherwise cost a transaction each, an eighth of the engine's CPU per item). A
node's and a run's rows never wait: a dependent started on a node's result must not
outlive it in a crash, and nothing follows an item. Nothing a client sees is unwritten:
the feed tells rows once written, and a client's read of a run writes what is marked
first (:meth:`RunWriter.flush`), so what a client has seen is what a restarted engine
finds. While the disk is full, or the database
cannot be reached (PostgreSQL restarting), nothing is lost: the changes wait in memory
(what the API shows) and are tried again once a second, one retry however many runs
change meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fluksio.agent.realtime import realtime_after, realtime_monotonic
from fluksio.clock import Clock, Timer
from fluksio.engine.runs.machine.effects import Save
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.runs.store import RunStore
from fluksio.engine.runs.views import RunChange
from fluksio.errors import StorageFull, StoreAway
from fluksio.logs import get_logger
from fluksio.wire.states import NodeState

__all__ = ["FLUSH_RETRY_S", "FLUSH_SPACING_S", "RunWriter"]

log = get_logger(__name__)
FLUSH_RETRY_S = 1.0
"""While the disk is full, how often the runs' changes kept in memory are tried again."""
FLUSH_SPACING_S = 0.02
"""On a busy engine, the least time between two writes of array items' rows."""


@dataclass
class _Dirty:
    row: RunRow
    nodes: dict[tuple[str, int | None], NodeRow] = field(default_factory=dict)
    """By node, and item of an array."""
    run_changed: bool = False


class RunWriter:
    def __init__(
        self, store: RunStore, on_written: Callable[[Sequence[RunChange]], None], clock: Clock
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_written = on_written
        self._dirty: dict[str, _Dirty] = {}
        self._flush_pending = False
        self._flush_later: asyncio.TimerHandle | None = None
        self._flushed_at = -FLUSH_SPACING_S
        """When rows were last written (real monotonic seconds)."""
        self._store_full = False
        self.failed_writes = 0
        """Writes of the runs' rows that failed (and were tried again), since start."""
        self._flush_retry: Timer | None = None
        self.closing = False

    def create(self, row: RunRow, nodes: Sequence[NodeRow]) -> None:
        """Write a new run now (a full disk refuses it: the caller's request fails)."""
        self._store.create(row, list(nodes))
        # Told as it is now: a pass may start a node before the next write.
        self._on_written(
            [RunChange(row, [n for n in nodes if n.state is not NodeState.PENDING], True)]
        )

    def save(self, effect: Save) -> None:
        """Mark the rows the run machine changed; they are written with the moment's
        others."""
        row = effect.row
        dirty = self._dirty.get(row.id)
        if dirty is None:
            dirty = self._dirty[row.id] = _Dirty(row)
        for node in effect.nodes:
            dirty.nodes[node.node_id, node.item] = node
        dirty.run_changed |= effect.run_changed
        # A run's or a node's row is written within the moment: what follows a node (a
        # dependent started on its result) must never outlive it in a crash. An array's
        # items, which nothing follows, may wait for the spacing.
        urgent = effect.run_changed or any(node.item is None for node in effect.nodes)
        if urgent and self._flush_later is not None:
            self._flush_later.cancel()  # brought forward to this moment
            self._flush_later = None
            self._flush_pending = False
        if not self._flush_pending:
            self._flush_pending = True
            # After the scheduling pass this moment kicked (a call ended: the next one is
            # placed), so that what it starts is written in the same transaction; items
            # no sooner than the spacing after the last write. Pacing of I/O, on real
            # time whatever the engine's clock (a moved clock must not hold rows back).
            wait = self._flushed_at + FLUSH_SPACING_S - realtime_monotonic()
            if wait > 0 and not urgent:
                self._flush_later = realtime_after(wait, self.flush)
            else:
                loop = asyncio.get_running_loop()
                loop.call_soon(loop.call_soon, self.flush)

    def flush(self) -> None:
        """Write every marked row now, in one transaction."""
        self._flush_pending = False
        if self._flush_later is not None:
            self._flush_later.cancel()
            self._flush_later = None
        dirty, self._dirty = self._dirty, {}
        if not dirty:
            return
        self._flushed_at = realtime_monotonic()
        try:
            self._store.save_many(
                [(d.row.id, list(d.nodes.values())) for d in dirty.values()],
                [d.row for d in dirty.values() if d.run_changed],
            )
        except (StorageFull, StoreAway) as failed:
            self.failed_writes += 1
            self._dirty = dirty  # nothing was written: all of it waits, in memory
            if not self._store_full:
                said = "store.full" if isinstance(failed, StorageFull) else "store.away"
                log.error(said, error=failed.detail, runs=len(dirty))
            self._store_full = True
            if not self.closing:
                self._flush_pending = True
                if self._flush_retry is None:
                    self._flush_retry = self._clock.call_later(FLUSH_RETRY_S, self._retry_flush)
            return
        if self._store_full:
            self._store_full = False
            log.info("store.writable", runs=len(dirty))
        self._on_written(
            [RunChange(d.row, list(d.nodes.values()), d.run_changed) for d in dirty.values()]
        )

    @property
    def unwritten_runs(self) -> int:
        """Runs whose changes wait in memory because the last write failed (the disk full,
        the database away); 0 while the store takes writes."""
        return len(self._dirty) if self._store_full else 0

    def _retry_flush(self) -> None:
        self._flush_retry = None
        self.flush()
