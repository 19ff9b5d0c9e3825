"""The dispatcher carries the run machine's effects out: it writes what the machine
records (and tells the stream), queues and withdraws calls in the scheduler, frees what an
ended call held, stops calls, refills arrays, and sets the timers of retries.

A mixin of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, which gives what it uses.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from typing import TYPE_CHECKING, assert_never

from fluksio.engine.dispatch.adoptions import Adoptions
from fluksio.engine.runs.items import ArrayItems
from fluksio.engine.runs.machine.effects import (
    AwaitWorker,
    CancelledAhead,
    Create,
    Effect,
    Ended,
    ItemsInterrupted,
    Log,
    Progress,
    Queue,
    Recording,
    Refill,
    Release,
    RetryAt,
    Save,
    Stop,
    Withdraw,
)
from fluksio.engine.runs.views import Executor, RunChange, RunView, stored_view
from fluksio.engine.stream import CallProgressed, RunsWritten
from fluksio.logs import get_logger

__all__ = ["ENDED_KEPT", "RunEffects"]

log = get_logger("fluksio.engine.dispatch.dispatcher")
ENDED_KEPT = 256
"""Ended runs kept in memory as written, for the read that follows an end."""


class RunEffects(Adoptions):
    items: ArrayItems
    _executors: dict[str, Executor]
    _waiters: dict[str, asyncio.Event]
    _recently_ended: collections.OrderedDict[str, RunView]

    if TYPE_CHECKING:  # given by the class it is mixed into

        def kick(self) -> None:
            raise NotImplementedError

        def placed_on(self, call_id: str) -> str:
            raise NotImplementedError

    def _apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            self._carry_out(effect)

    def _carry_out(self, effect: Effect) -> None:
        # Every effect has its case: one without is a type error (assert_never), not a
        # KeyError at run time.
        match effect:
            case (
                Create()
                | Save()
                | Progress()
                | Ended()
                | ItemsInterrupted()
                | CancelledAhead()
                | Log()
            ):
                self._record(effect)
            case Queue():
                self._queue(effect)
            case Withdraw():
                self._withdraw(effect)
            case Release():
                self._release(effect)
            case Stop():
                self._stop(effect.call_id)
            case RetryAt():
                self._retry_at(effect)
            case Refill():
                self._refill(effect)
            case AwaitWorker():
                self._await_worker(effect)
            case _:
                assert_never(effect)

    def _record(self, effect: Recording) -> None:
        """What the record and its readers (the feed, the views) are told."""
        match effect:
            case Save():
                self._writer.save(effect)
            case Progress():
                self._progressed(effect)
            case Create():
                self._created(effect)
            case Ended():
                self._ended(effect)
            case CancelledAhead():
                self.items.store.cancel_ahead(effect.run_id, effect.node_id, effect.ranges)
            case ItemsInterrupted():
                self.items.store.interrupted(
                    effect.run_id,
                    effect.node.node_id,
                    effect.error,
                    effect.now,
                    spare_held=effect.spare_held,
                )
            case Log():
                log.info(effect.event, **effect.fields)
            case _:
                assert_never(effect)

    def _refill(self, effect: Refill) -> None:
        run_id, spec = effect.run_id, effect.spec
        count = self.items.room(spec, effect.count, effect.in_line)
        found, cursor = self.items.next(run_id, spec, effect.cursor, count, effect.total)
        self._apply(
            self._machine.arrays.refilled(run_id, spec.id, found, cursor, self._clock.now())
        )

    def _retry_at(self, effect: RetryAt) -> None:
        def due() -> None:
            if not self._closing:  # a node waiting at shutdown is queued at the restart
                run_id, node_id, item = effect.run_id, effect.node_id, effect.item
                self._apply(self._machine.retry_due(run_id, node_id, now(), item))

        now = self._clock.now
        self._clock.call_later(max(0.0, effect.at - now()), due)

    # The queue or the free amounts changed: a pass, once for the moment, and before the
    # moment's rows are written, so that what it starts is written with them.

    def _queue(self, effect: Queue) -> None:
        self._scheduler.submit(effect.request)
        self._changed()
        self.kick()

    def _withdraw(self, effect: Withdraw) -> None:
        self._scheduler.withdraw(effect.call_id)
        self._changed()
        self.kick()

    def _release(self, effect: Release) -> None:
        allocation = self._scheduler.allocation(effect.call_id)
        if allocation is not None:  # unless its worker went meanwhile
            self._scheduler.finish(effect.call_id)
            self._place_changed(allocation.place_id)
        self._changed()
        self.kick()

    def _progressed(self, effect: Progress) -> None:
        self._stream.emit(CallProgressed(effect.row, effect.node, effect.count))

    def _created(self, effect: Create) -> None:
        row = effect.row
        self._writer.create(row, effect.nodes)
        log.info("run.started", run_id=row.id, flow=row.flow, nodes=len(effect.nodes))

    def _ended(self, effect: Ended) -> None:
        # Written now: a waiter reads the ended run from the store (or, while the disk is
        # full, from memory: it stays live until it is written).
        self._writer.flush()
        done = self._waiters.pop(effect.row.id, None)
        if done is not None:
            done.set()
        log.info("run.ended", run_id=effect.row.id, state=effect.row.state)

    def _written(self, changes: Sequence[RunChange]) -> None:
        self._stream.emit(RunsWritten(changes))
        for change in changes:
            ended = self._machine.written(change.row.id)
            if ended is not None:
                self.items.source.forget(change.row.id)
                # Kept as written, for who reads it next (a waiter, mostly): no SQLite read.
                self._recently_ended[change.row.id] = stored_view(*ended)
                if len(self._recently_ended) > ENDED_KEPT:
                    self._recently_ended.popitem(last=False)

    def _stop(self, call_id: str) -> None:
        if self._stop_awaited(call_id):
            return
        executor = self._executors.get(self.placed_on(call_id))
        if executor is not None:
            executor.cancel(call_id)
