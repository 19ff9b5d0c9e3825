"""The dispatcher's answers to what a client asks of runs: start, cancel, run again what
failed, delete; and the retention, its own timer, that deletes ended runs by age.

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState` and the dispatcher as its
:class:`~fluksio.engine.dispatch.state.Hub`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fluksio.engine.dispatch.questions import Questions
from fluksio.engine.dispatch.state import DispatchState, Hub
from fluksio.engine.runs.machine.references import BadReference, Ref, find_results
from fluksio.engine.runs.machine.rows import NodeRow
from fluksio.engine.runs.retention import prune_once
from fluksio.engine.runs.views import RunView
from fluksio.errors import Conflict, InvalidInput, NotFound
from fluksio.logs import get_logger
from fluksio.wire.states import NodeState, RunState

if TYPE_CHECKING:
    from fluksio.engine.artifacts import ArtifactStore

__all__ = ["RunRequests"]

log = get_logger("fluksio.engine.dispatch.dispatcher")


class RunRequests:
    """Runs asked for, cancelled, retried, deleted and kept for a while."""

    def __init__(self, state: DispatchState, hub: Hub, questions: Questions) -> None:
        self._state = state
        self._hub = hub
        self._questions = questions

    def start_run(
        self, flow_name: str, params: dict[str, Any], items: dict[str, int] | None = None
    ) -> RunView:
        """Start a run of a saved flow (``items``: how many each array node has); the
        answer already says where it runs or why it waits."""
        record = self._state.flows.get(flow_name)
        if record is None:
            raise NotFound(f"no flow named {flow_name!r}")
        settled = self.settled([params])
        run_id = secrets.token_hex(8)
        now = self._state.clock.now()
        started = self._state.machine.start(
            run_id, flow_name, record.spec, params, now, items, settled
        )
        self._hub.apply(started)
        self._hub.run_pass()
        view = self._questions.view_run(run_id)
        assert view is not None
        return view

    def cancel_run(self, run_id: str) -> RunView:
        if not self._state.machine.has(run_id) or self._state.machine.is_over(run_id):
            found = self._state.runs_store.get(run_id)
            if found is None:
                raise NotFound(f"no run with id {run_id!r}")
            raise Conflict(f"run {run_id} has already ended ({found[0].state})")
        self._hub.apply(self._state.machine.cancel(run_id, self._state.clock.now()))
        log.info("run.cancelling", run_id=run_id)
        view = self._questions.view_run(run_id)
        assert view is not None
        return view

    def cancel_items(self, run_id: str, node_id: str | None, positions: list[int]) -> RunView:
        """Cancel chosen items of a live run's array (``node_id``: which, when it has more
        than one); those over already are left as they are."""
        view = self._questions.view_run(run_id)
        if view is None:
            raise NotFound(f"no run with id {run_id!r}")
        arrays = [n.row.node_id for n in view.nodes if n.row.array is not None]
        if not arrays:
            raise NotFound(f"run {run_id} has no array node: cancel the run instead")
        name = node_id if node_id is not None else (arrays[0] if len(arrays) == 1 else None)
        if name is None or name not in arrays:
            raise InvalidInput("node", f"name one of the run's arrays: {', '.join(arrays)}")
        if not self._state.machine.has(run_id) or self._state.machine.is_over(run_id):
            raise Conflict(f"run {run_id} has ended ({view.row.state}): nothing is left to cancel")
        now = self._state.clock.now()
        effects, cancelled = self._state.machine.arrays.cancel_items(run_id, name, positions, now)
        self._hub.apply(effects)
        log.info("items.cancelled", run_id=run_id, node=name, items=cancelled)
        found = self._questions.view_run(run_id)
        assert found is not None
        return found

    def retry_failed(self, run_id: str) -> RunView:
        """An ended run's failed nodes and array items run again in it, each as a new
        attempt, with the nodes they had skipped."""
        if self._state.machine.has(run_id):
            raise Conflict(f"run {run_id} has not ended: wait for it, then retry what failed")
        found = self._state.runs_store.get(run_id)
        if found is None:
            raise NotFound(f"no run with id {run_id!r}")
        row, nodes = found
        if row.state is not RunState.FAILED:
            raise Conflict(f"run {run_id} ended {row.state}: only a failed run has failed items")
        again = [n for n in nodes if n.state in (NodeState.FAILED, NodeState.SKIPPED)]
        for node in again:
            if node.array is not None:
                self._state.items.store.run_again(run_id, node.node_id)
                node.array = self._state.items.store.summary(run_id, node.node_id, node.array.total)
            elif node.state is NodeState.FAILED:
                node.attempt += 1
            node.state, node.error, node.ended_at = NodeState.PENDING, None, None
        self._state.runs_store.reopen(run_id, again)
        self._state.recently_ended.pop(run_id, None)
        row.state, row.ended_at = RunState.RUNNING, None
        settled = self.settled([row.params])
        self._hub.apply(
            self._state.machine.recover([(row, nodes)], self._state.clock.now(), settled)
        )
        log.info("run.retried", run_id=run_id, nodes=len(again))
        view = self._questions.view_run(run_id)
        assert view is not None
        return view

    def delete_run(self, run_id: str) -> None:
        """Delete an ended run: its rows, and what the engine keeps of it in memory."""
        live = self._state.machine.snapshot(run_id)
        if live is not None:
            state = live[0].state
            raise Conflict(f"run {run_id} has not ended ({state}): cancel it, then delete it")
        if not self._state.runs_store.delete(run_id):
            found = self._state.runs_store.get(run_id)
            if found is None:
                raise NotFound(f"no run with id {run_id!r}")
            raise Conflict(f"run {run_id} has not ended ({found[0].state})")
        self.forget_runs([run_id])
        log.info("run.deleted", run_id=run_id)

    def forget_runs(self, run_ids: Sequence[str]) -> None:
        """These ended runs were deleted: nothing of them is answered from memory."""
        for run_id in run_ids:
            self._state.recently_ended.pop(run_id, None)

    def settled(self, params: Sequence[dict[str, Any]]) -> dict[Ref, NodeRow]:
        """The ended nodes, of runs no longer live, whose results these parameters name;
        :class:`InvalidInput` for a reference to nothing (a live run's are the
        machine's to follow)."""
        settled: dict[Ref, NodeRow] = {}
        for one in params:
            try:
                refs = find_results(one)
            except BadReference as bad:
                raise InvalidInput(bad.where, bad.detail) from None
            for run_id, node_id in refs:
                view = self._questions.view_run(run_id)
                rows = view.nodes if view is not None else ()
                node = next((n.row for n in rows if n.row.node_id == node_id), None)
                if node is None:
                    raise InvalidInput(
                        "params",
                        f"a result reference names node {node_id!r} of run {run_id},"
                        " which this engine does not have",
                    )
                if not self._state.machine.has(run_id):
                    settled[run_id, node_id] = node
        return settled

    def keep_runs_for(self, keep_s: float, every_s: float, artifacts: ArtifactStore) -> None:
        """Every ``every_s``, delete the runs that ended more than ``keep_s`` ago, the
        transient flows none of the kept runs is of, and the artifacts nothing kept names
        (:mod:`~fluksio.engine.runs.retention`); until the dispatcher closes."""

        async def prune() -> None:
            try:
                await prune_once(
                    self._state.runs_store,
                    artifacts,
                    self._state.flows,
                    keep_s=keep_s,
                    now=self._state.clock.now(),
                    forget_runs=self.forget_runs,
                    oldest_call_started=self._questions.oldest_call_started,
                )
            except Exception:  # the next round tries again; the engine goes on
                log.exception("runs.prune_failed")
            finally:
                arm()

        def due() -> None:
            self._state.retention_due = None
            if not self._state.closing:
                task = asyncio.get_running_loop().create_task(prune())
                self._state.tasks.add(task)
                task.add_done_callback(self._state.tasks.discard)

        def arm() -> None:
            if not self._state.closing:
                self._state.retention_due = self._state.clock.call_later(every_s, due)

        arm()
