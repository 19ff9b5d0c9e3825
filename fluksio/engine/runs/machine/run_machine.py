"""Runs as a pure state machine: what happened, with ``now``, in; what to do, out.

The machine holds the runs that have not ended (and those ended but not yet written):
each node's spec and row, its dependents, and the events its call reported. Each input is
a method named for what happened (a run started or was cancelled; a call was placed,
started, reported, ended; an engine restarted) and returns the effects its owner, the
dispatcher, carries out in order (declared in :mod:`fluksio.engine.runs.machine.effects`):

- :class:`Queue` a call in the scheduler, :class:`Withdraw` a waiting one, :class:`Stop`
  a running one, :class:`Release` what an ended one held;
- :class:`Create` a run's rows, :class:`Save` rows that changed (written together with
  the moment's others), :class:`Progress` a running call's reported events;
- :class:`Ended`: a run is over (its waiters are told once it is written).

No clock, no I/O, no chance: ``now`` comes with each input and new call ids from the
``new_id`` it is given. The node lifecycle is in :mod:`fluksio.wire.states`; what
happens at a restart is :meth:`RunMachine.recover`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind
from fluksio.engine.runs.machine.arrays import Arrays
from fluksio.engine.runs.machine.book import CRASH_LIMIT, RunBook
from fluksio.engine.runs.machine.effects import (
    CallInputs,
    Create,
    Effect,
    Progress,
    Release,
    Save,
    Stop,
    Withdraw,
)
from fluksio.engine.runs.machine.redact import redact
from fluksio.engine.runs.machine.references import Ref, substitute
from fluksio.engine.runs.machine.restarts import Restarts
from fluksio.engine.runs.machine.retries import Retries
from fluksio.engine.runs.machine.rows import ArraySummary, NodeRow, RunRow
from fluksio.engine.runs.machine.state import LiveNode, LiveRun, NodeSnapshot
from fluksio.engine.runs.machine.waits import Waits
from fluksio.engine.workers.connection.holder import Holder
from fluksio.wire.flows import FlowSpec, NodeSpec
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import (
    TERMINAL_RUN_STATES,
    NodeState,
    RunState,
)

__all__ = ["RunMachine"]


class RunMachine:
    """The machine's inputs and questions. Its state and rules are its
    :class:`~fluksio.engine.runs.machine.book.RunBook`'s; its arrays, retries, waits and
    restarts are parts it has, each given the book and, for what involves another part,
    this machine as their :class:`~fluksio.engine.runs.machine.book.Moves`."""

    def __init__(self, new_id: Callable[[], str], crash_limit: int = CRASH_LIMIT) -> None:
        self._book = RunBook(new_id, crash_limit)
        self.arrays = Arrays(self._book, self)
        """Its array nodes' items (``refilled``, ``cancel_items``; ``item_row``, ...)."""
        self.waits = Waits(self._book, self)
        """Its runs that wait for others' results (``waiting_for``)."""
        self._retries = Retries(self._book, self)
        self._restarts = Restarts(self._book, self, self.arrays, self.waits)
        # Inputs its parts take, as the machine's own.
        self.retry_due = self._retries.retry_due
        self.recover = self._restarts.recover
        self.adopted = self._restarts.adopted
        self.not_back = self._restarts.not_back

    # -- what the parts ask of the whole (Moves) ----------------------------------------

    def queue(
        self, run: LiveRun, node: LiveNode, queued_at: float, effects: list[Effect]
    ) -> LiveNode:
        """Queue a node's call; an array's turn opens it instead (its items go in line)."""
        if node.spec.is_array and node.row.item is None:
            return self.arrays.open(run, node, queued_at, effects)
        return self._book.queue_call(run, node, queued_at, effects)

    def finish(
        self,
        run: LiveRun,
        changed: list[LiveNode],
        now: float,
        effects: list[Effect],
        *,
        announce: bool = False,
    ) -> None:
        """Save what changed and end the run if it is over
        (:meth:`~fluksio.engine.runs.machine.book.RunBook.settle`); the runs that wait
        for what ended here hear of it after."""
        self._book.settle(run, changed, now, effects, announce=announce)
        if self._book.awaited:
            self.waits.tell_waiters(run, changed, now, effects)

    def item_moved(
        self, run: LiveRun, item: LiveNode, before: NodeState, now: float, effects: list[Effect]
    ) -> None:
        self.arrays.item_moved(run, item, before, now, effects)

    def await_worker(self, run: LiveRun, node: LiveNode, effects: list[Effect]) -> bool:
        return self._restarts.await_worker(run, node, effects)

    # -- inputs ----------------------------------------------------------------------------

    def start(  # noqa: PLR0917 (what a run is made of, in the order the dispatcher has it)
        self,
        run_id: str,
        flow_name: str,
        spec: dict[str, Any],
        params: dict[str, Any],
        now: float,
        items: dict[str, int] | None = None,
        settled: dict[Ref, NodeRow] | None = None,
    ) -> list[Effect]:
        """A run of ``spec`` was asked for: create it and queue its first nodes.
        ``items``: how many items each array node has; ``settled``: the ended nodes
        whose results its parameters name (of runs no longer live)."""
        flow = FlowSpec.model_validate(spec)
        row = RunRow(
            id=run_id,
            flow=flow_name,
            spec=spec,
            params=params,
            state=RunState.QUEUED,
            created_at=now,
        )
        totals = items or {}
        run = self._book.build(
            row,
            flow,
            [
                NodeRow(
                    node.id,
                    NodeState.PENDING,
                    array=ArraySummary(totals[node.id], {NodeState.QUEUED.value: totals[node.id]})
                    if node.is_array
                    else None,
                )
                for node in flow.nodes
            ],
        )
        self._book.runs[run_id] = run
        effects: list[Effect] = [Create(row, tuple([n.row for n in run.nodes.values()]))]
        changed = self.waits.await_results(run, settled or {}, now)
        changed += [
            self.queue(run, n, now, effects)
            for n in run.nodes.values()
            if n.row.state is NodeState.PENDING and self._book.ready(run, n)
        ]
        self.finish(run, changed, now, effects)
        return effects

    def cancel(self, run_id: str, now: float) -> list[Effect]:
        """Cancel a live run: what has not started ends now; what runs is asked to stop."""
        run = self._book.runs[run_id]
        run.cancelling = True
        effects: list[Effect] = []
        changed = []
        for node in run.nodes.values():
            state = node.row.state
            node.retry_at = None  # a back-off ends with the run: nothing more starts
            if node.array is not None:
                changed += self.arrays.cancel_all(run, node, now, effects)
                effects += [Stop(str(i.row.call_id)) for i in self._book.running_items(node)]
            elif state in (NodeState.PENDING, NodeState.QUEUED):
                if state is NodeState.QUEUED:
                    effects.append(Withdraw(self._book.forget_call(node)))
                self._book.cancel_unstarted(run, node, now)
                changed.append(node)
            elif state is NodeState.RUNNING:
                effects.append(Stop(str(node.row.call_id)))
        self.finish(run, changed, now, effects)
        return effects

    def placed(
        self,
        call_id: str,
        place: str,
        provenance: Provenance,
        now: float,
        holder: Holder | None = None,
    ) -> CallInputs:
        """The scheduler placed the call: it records where (and ``holder``, who holds it
        there across a restart), and says what the call needs."""
        run, node = self._book.calls[call_id]
        node.row.place = place
        node.row.holder = holder
        node.row.provenance = provenance
        node.row.started_at = now
        node.row.ended_at = None  # an earlier attempt's
        results = {d: run.nodes[d].row.result for d in node.spec.after}
        params = substitute(run.row.params, run.given) if run.given else run.row.params
        return CallInputs(
            run.row,
            node.spec,
            params,
            results,
            node.row.attempt,
            node.item_params,
            node.row.item,
            node.row.checkpoint,
        )

    def running(self, call_id: str, secrets: tuple[str, ...]) -> list[Effect]:
        """The placed call was handed to its executor, with these secret values."""
        run, node = self._book.calls[call_id]
        node.secrets = secrets
        node.row.state = NodeState.RUNNING
        run_changed = run.row.state is RunState.QUEUED
        if run_changed:
            run.row.state = RunState.RUNNING
            run.row.started_at = node.row.started_at
        effects: list[Effect] = []
        rows = [node.row] if node.row.item is None else self.arrays.item_running(run, node, effects)
        return [Save(run.row, tuple(rows), run_changed), *effects]

    def sent_ahead(self, call_id: str) -> list[Effect]:
        """The call went to a worker that holds it until a slot frees: it has not started,
        so its duration does not count the wait."""
        return self._set_start(call_id, None)

    def started(self, call_id: str, now: float) -> list[Effect]:
        """A call sent ahead left its worker's line and runs from ``now``."""
        return self._set_start(call_id, now)

    def _set_start(self, call_id: str, at: float | None) -> list[Effect]:
        found = self._book.calls.get(call_id)
        if found is None or found[1].row.state is not NodeState.RUNNING:
            return []  # it ended (or was queued again) meanwhile
        run, node = found
        node.row.started_at = at
        if node.row.item is not None:
            return []  # an item's start is written with its end: one write fewer each
        return [Save(run.row, (node.row,))]

    def reported(self, call_id: str, record: dict[str, Any]) -> list[Effect]:
        """The running call reported an event (``fluksio.emit``)."""
        found = self._book.calls.get(call_id)
        if found is None:
            return []  # it ended (or was queued again) meanwhile
        run, node = found
        record.pop("kind", None)
        node.events.append(redact(record, node.secrets))
        node.event_count += 1
        return [Progress(run.row, node.row, node.event_count)]

    def ended(self, call_id: str, outcome: CallOutcome, now: float) -> list[Effect]:
        """The placed call ended (or never got to start): give back its place, then record
        its outcome, retry it, or queue what now may run."""
        found = self._book.calls.get(call_id)
        if found is None:
            return []
        run, node = found
        before = node.row.state
        effects: list[Effect] = [Release(self._book.forget_call(node))]
        outcome = self._retries.counted(run, node, outcome)
        if self._retries.retry(run, node, outcome, now, effects):
            if node.row.item is not None:
                self.item_moved(run, node, before, now, effects)
            return effects
        row = node.row
        row.logs = redact(outcome.logs, node.secrets)
        row.events = list(node.events)
        if outcome.ok:
            row.result = redact(outcome.result, node.secrets)
            self._book.end(run, node, NodeState.SUCCEEDED, now)
        else:
            cancelled = (run.cancelling or node.cancelling) and (outcome.error or {}).get(
                "type"
            ) == ErrorKind.NODE_CANCELLED
            state = NodeState.CANCELLED if cancelled else NodeState.FAILED
            self._book.end(run, node, state, now, redact(outcome.error, node.secrets))
        node.secrets = ()
        if node.row.item is not None:
            self.item_moved(run, node, before, now, effects)
            return effects
        changed = [node]
        if row.state is NodeState.SUCCEEDED:
            if not run.cancelling:
                for dependent_id in node.dependents:
                    dependent = run.nodes[dependent_id]
                    if dependent.row.state is NodeState.PENDING and self._book.ready(
                        run, dependent
                    ):
                        changed.append(self.queue(run, dependent, now, effects))
        else:
            changed += self._book.skip_dependents(run, node, now)
        self.finish(run, changed, now, effects)
        return effects

    def written(self, run_id: str) -> tuple[RunRow, list[NodeRow]] | None:
        """The run's rows are written; an ended run is let go (its final rows returned):
        it lives in the store now."""
        run = self._book.runs.get(run_id)
        if run is None or run.row.state not in TERMINAL_RUN_STATES:
            return None
        del self._book.runs[run_id]
        return run.row, [node.row for node in run.nodes.values()]

    # -- questions -------------------------------------------------------------------------

    def has(self, run_id: str) -> bool:
        return run_id in self._book.runs

    def is_over(self, run_id: str) -> bool:
        run = self._book.runs.get(run_id)
        return run is None or run.row.state in TERMINAL_RUN_STATES

    def snapshot(self, run_id: str) -> tuple[RunRow, list[NodeSnapshot]] | None:
        """A live run as it stands (reading it changes nothing)."""
        run = self._book.runs.get(run_id)
        if run is None:
            return None
        nodes = [
            NodeSnapshot(
                node.row,
                list(node.events),
                node.event_count,
                node.row.call_id if node.row.state is NodeState.QUEUED else None,
                node.retry_at,
                node.spec.most_attempts,
            )
            for node in run.nodes.values()
        ]
        return run.row, nodes

    def call(self, call_id: str) -> tuple[RunRow, NodeSpec, NodeRow] | None:
        """The run and node of a queued or running call."""
        found = self._book.calls.get(call_id)
        if found is None:
            return None
        run, node = found
        return run.row, node.spec, node.row

    def running_calls(self) -> Iterator[str]:
        for _run, node in self._book.calls.values():
            if node.row.state is NodeState.RUNNING:
                yield str(node.row.call_id)
