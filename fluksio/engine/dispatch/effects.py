"""The dispatcher carries the run machine's effects out: it writes what the machine
records (and tells the stream), queues and withdraws calls in the scheduler, frees what an
ended call held, stops calls, refills arrays, and sets the timers of retries.

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState` and the dispatcher as its
:class:`~fluksio.engine.dispatch.state.Hub`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never

from fluksio.engine.dispatch.adoptions import Adoptions
from fluksio.engine.dispatch.questions import Questions
from fluksio.engine.dispatch.state import DispatchState, Hub
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
from fluksio.engine.runs.views import RunChange, stored_view
from fluksio.engine.stream import CallProgressed, RunsWritten
from fluksio.logs import get_logger

__all__ = ["ENDED_KEPT", "Effects"]

log = get_logger("fluksio.engine.dispatch.dispatcher")
ENDED_KEPT = 256
"""Ended runs kept in memory as written, for the read that follows an end."""


class Effects:
    """What the run machine decided, carried out (the table in the module docstring)."""

    def __init__(
        self, state: DispatchState, hub: Hub, adoptions: Adoptions, questions: Questions
    ) -> None:
        self._state = state
        self._hub = hub
        self._adoptions = adoptions
        self._questions = questions

    def apply(self, effects: list[Effect]) -> None:
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
                self.stop(effect.call_id)
            case RetryAt():
                self._retry_at(effect)
            case Refill():
                self._refill(effect)
            case AwaitWorker():
                self._adoptions.await_worker(effect)
            case _:
                assert_never(effect)

    def _record(self, effect: Recording) -> None:
        """What the record and its readers (the feed, the views) are told."""
        match effect:
            case Save():
                self._state.writer.save(effect)
            case Progress():
                self._progressed(effect)
            case Create():
                self._created(effect)
            case Ended():
                self._ended(effect)
            case CancelledAhead():
                self._state.items.store.cancel_ahead(effect.run_id, effect.node_id, effect.ranges)
            case ItemsInterrupted():
                self._state.items.store.interrupted(
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
        count = self._state.items.room(spec, effect.count, effect.in_line)
        found, cursor = self._state.items.next(run_id, spec, effect.cursor, count, effect.total)
        self.apply(
            self._state.machine.arrays.refilled(
                run_id, spec.id, found, cursor, self._state.clock.now()
            )
        )

    def _retry_at(self, effect: RetryAt) -> None:
        def due() -> None:
            if not self._state.closing:  # a node waiting at shutdown is queued at the restart
                run_id, node_id, item = effect.run_id, effect.node_id, effect.item
                self.apply(self._state.machine.retry_due(run_id, node_id, now(), item))

        now = self._state.clock.now
        self._state.clock.call_later(max(0.0, effect.at - now()), due)

    # The queue or the free amounts changed: a pass, once for the moment, and before the
    # moment's rows are written, so that what it starts is written with them.

    def _queue(self, effect: Queue) -> None:
        self._state.scheduler.submit(effect.request)
        self._hub.changed()
        self._hub.kick()

    def _withdraw(self, effect: Withdraw) -> None:
        self._state.scheduler.withdraw(effect.call_id)
        self._hub.changed()
        self._hub.kick()

    def _release(self, effect: Release) -> None:
        allocation = self._state.scheduler.allocation(effect.call_id)
        if allocation is not None:  # unless its worker went meanwhile
            self._state.scheduler.finish(effect.call_id)
            self._hub.place_changed(allocation.place_id)
        self._hub.changed()
        self._hub.kick()

    def _progressed(self, effect: Progress) -> None:
        self._state.stream.emit(CallProgressed(effect.row, effect.node, effect.count))

    def _created(self, effect: Create) -> None:
        row = effect.row
        self._state.writer.create(row, effect.nodes)
        log.info("run.started", run_id=row.id, flow=row.flow, nodes=len(effect.nodes))

    def _ended(self, effect: Ended) -> None:
        # Written now: a waiter reads the ended run from the store (or, while the disk is
        # full, from memory: it stays live until it is written).
        self._state.writer.flush()
        done = self._state.waiters.pop(effect.row.id, None)
        if done is not None:
            done.set()
        log.info("run.ended", run_id=effect.row.id, state=effect.row.state)

    def written(self, changes: Sequence[RunChange]) -> None:
        self._state.stream.emit(RunsWritten(changes))
        for change in changes:
            ended = self._state.machine.written(change.row.id)
            if ended is not None:
                self._state.items.source.forget(change.row.id)
                # Kept as written, for who reads it next (a waiter, mostly): no SQLite read.
                self._state.recently_ended[change.row.id] = stored_view(*ended)
                if len(self._state.recently_ended) > ENDED_KEPT:
                    self._state.recently_ended.popitem(last=False)

    def stop(self, call_id: str) -> None:
        if self._adoptions.stop_awaited(call_id):
            return
        executor = self._state.executors.get(self._questions.placed_on(call_id))
        if executor is not None:
            executor.cancel(call_id)
