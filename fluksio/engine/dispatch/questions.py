"""The dispatcher's read-only questions: runs, waiting calls, places and profiles.

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState`: nothing here changes it (as
:class:`~fluksio.scheduler.answers.Answers` is the scheduler's); a read writes the rows
already marked first. The API and the feed read them as frozen views, made in
:mod:`fluksio.engine.views`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib

from fluksio.engine.dispatch.state import DispatchState
from fluksio.engine.runs.items import unstarted
from fluksio.engine.runs.machine.rows import NodeRow
from fluksio.engine.runs.views import NodeView, RunView, WaitingCall, stored_view, waiting_to_retry
from fluksio.provisioners.machine.requests import ProfileStatus
from fluksio.scheduler import ENGINE_ID, PlaceView, WaitReason
from fluksio.wire.states import NodeState

__all__ = ["Questions"]


class Questions:
    """What the dispatcher answers without changing anything."""

    def __init__(self, state: DispatchState) -> None:
        self._state = state

    def write_marked(self) -> None:
        """Write the runs' rows marked as changed, now: a client is about to read, and
        what it sees must be what a restarted engine would find."""
        self._state.writer.flush()

    def view_run(self, run_id: str) -> RunView | None:
        """A run as a client reads it, written first."""
        self.write_marked()
        live = self._state.machine.snapshot(run_id)
        if live is not None:
            row, nodes = live
            views = []
            for node in nodes:
                reason = None
                if node.queued_call is not None:
                    found = self.reason(node.queued_call)
                    reason = found.text if found is not None else None
                elif node.retry_at is not None:
                    now = self._state.clock.now()
                    reason = waiting_to_retry(node.row, node.most_attempts, node.retry_at, now)
                elif node.row.sent_ahead:
                    reason = f"sent ahead to {node.row.place}: waits there for a free slot"
                elif node.row.state is NodeState.PENDING and (
                    waits := self._state.machine.waits.waiting_for(run_id)
                ):
                    named = ", ".join(f"node {node!r} of run {run}" for run, node in waits)
                    reason = f"waits for the result of {named}"
                views.append(NodeView(node.row, reason, node.event_count, node.events))
            return RunView(row, tuple(views))
        ended = self._state.recently_ended.get(run_id)
        if ended is not None:
            return ended
        stored = self._state.runs_store.get(run_id)
        return stored_view(*stored) if stored is not None else None

    def item_row(self, run_id: str, node_id: str, position: int) -> NodeRow | None:
        """An array's item as it stands: in memory while it is in line, runs or waits to
        retry; else its stored row, or (not started) a row that says how it stands.
        None: the run has no such array, or no such item."""
        view = self.view_run(run_id)
        array = (
            next((n.row for n in view.nodes if n.row.node_id == node_id), None) if view else None
        )
        if array is None or array.array is None or not 0 <= position < array.array.total:
            return None
        live = self._state.machine.arrays.item_row(run_id, node_id, position)
        if live is not None:
            return live
        stored = self._state.items.store.page(run_id, node_id, after=position - 1, limit=1)
        if stored and stored[0].item == position:
            return stored[0]
        return unstarted(array, position)

    async def wait_run(self, run_id: str, timeout: float) -> RunView | None:
        """The run once it has ended, or as it is after ``timeout`` seconds."""
        if timeout > 0 and not self._state.machine.is_over(run_id) and not self._state.closing:
            done = self._state.waiters.setdefault(run_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                async with self._state.clock.timeout(timeout):
                    await done.wait()
        return self.view_run(run_id)

    def waiting_calls(self) -> list[WaitingCall]:
        """Every waiting node call, in the order it will be served, with its reason."""
        found = []
        arrays: set[tuple[str, str]] = set()  # each array once: its first item in line
        for call_id in self._state.scheduler.waiting():
            call = self._state.machine.call(call_id)
            if call is None:
                continue
            run, spec, row = call
            items = None
            if row.item is not None:
                if (run.id, spec.id) in arrays:
                    continue
                arrays.add((run.id, spec.id))
                items = self._state.machine.arrays.items_waiting(run.id, spec.id)
            found.append(
                WaitingCall(
                    call_id=call_id,
                    run_id=run.id,
                    flow=run.flow,
                    node=spec.id,
                    worker=spec.worker,
                    queued_at=row.queued_at,
                    reason=self.reason(call_id),
                    items=items,
                )
            )
        return found

    def unwritten_runs(self) -> int:
        """Runs whose changes wait in memory, unwritten (see :class:`RunWriter`)."""
        return self._state.writer.unwritten_runs

    def failed_writes(self) -> int:
        """Writes of the runs' rows that failed since start (each tried again)."""
        return self._state.writer.failed_writes

    def waiting_labels(self) -> collections.Counter[str]:
        """How many calls wait, by the label each wants (``""``: any place will do)."""
        wanted: collections.Counter[str] = collections.Counter()
        for call_id in self._state.scheduler.waiting():
            call = self._state.machine.call(call_id)
            if call is not None:
                wanted[call[1].worker or ""] += 1
        return wanted

    def answering(self, worker_id: str) -> bool:
        """Whether the worker answers (the one record of it: its place in the scheduler)."""
        view = self._state.scheduler.view(worker_id)
        return view is not None and not view.paused

    def calls_on(self, worker_id: str) -> int:
        """The calls placed on the worker and not yet ended (its place's slots in use)."""
        view = self._state.scheduler.view(worker_id)
        return view.calls if view is not None else 0

    def reason(self, call_id: str) -> WaitReason | None:
        """Why a call waits, with how the provisioning it waits for stands now."""
        now = self._state.provisioning.now() if self._state.provisioning is not None else None
        return self._state.scheduler.reason(call_id, now)

    def has_waiting(self) -> bool:
        return self._state.scheduler.has_waiting()

    def placed_on(self, call_id: str) -> str:
        allocation = self._state.scheduler.allocation(call_id)
        return allocation.place_id if allocation is not None else ENGINE_ID

    def place(self, place_id: str) -> PlaceView | None:
        return self._state.scheduler.view(place_id)

    def profiles(self) -> list[ProfileStatus]:
        return self._state.provisioning.profiles() if self._state.provisioning is not None else []

    def oldest_call_started(self, default: float) -> float:
        """When the call in flight that started first did (``default`` with none)."""
        started = [default]
        for call_id in self._state.machine.running_calls():
            call = self._state.machine.call(call_id)
            if call is not None and call[2].started_at is not None:
                started.append(call[2].started_at)
        return min(started)
