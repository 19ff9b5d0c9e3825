"""Runs as a pure state machine: what happened, with ``now``, in; what to do, out.

The machine holds the runs that have not ended (and those ended but not yet written):
each node's spec and row, its dependents, and the events its call reported. Each input is
a method named for what happened (a run started or was cancelled; a call was placed,
started, reported, ended; an engine restarted) and returns the effects its owner, the
dispatcher, carries out in order (declared in :mod:`fluksio.engine.runs.effects`):

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

from collections.abc import Iterator
from typing import Any

from fluksio.agent.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.effects import (
    CallInputs,
    Create,
    Effect,
    Progress,
    Release,
    Save,
    Stop,
    Withdraw,
)
from fluksio.engine.runs.machine_adopt import RESTARTED, AdoptMoves
from fluksio.engine.runs.machine_arrays import ArrayMoves
from fluksio.engine.runs.machine_retry import RetryMoves
from fluksio.engine.runs.machine_state import LiveNode, LiveRun, NodeSnapshot
from fluksio.engine.runs.machine_waits import WaitMoves
from fluksio.engine.runs.redact import redact
from fluksio.engine.runs.references import Ref, substitute
from fluksio.engine.runs.rows import ArraySummary, HeldItem, NodeRow, RunRow
from fluksio.engine.workers.holder import Holder
from fluksio.wire.flows import FlowSpec, NodeSpec
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import (
    TERMINAL_NODE_STATES,
    TERMINAL_RUN_STATES,
    NodeState,
    RunState,
)

__all__ = ["RunMachine"]


def _cancelled() -> dict[str, str]:
    return error_record(ErrorKind.NODE_CANCELLED, "the run was cancelled")


class RunMachine(RetryMoves, ArrayMoves, WaitMoves, AdoptMoves):
    """The machine's inputs and questions; its rules are :class:`MachineRules`'s, its
    arrays', retries' and waits' moves those of its mixins."""

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
        run = self._build(
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
        self._runs[run_id] = run
        effects: list[Effect] = [Create(row, tuple([n.row for n in run.nodes.values()]))]
        changed = self._await_results(run, settled or {}, now)
        changed += [
            self._queue(run, n, now, effects)
            for n in run.nodes.values()
            if n.row.state is NodeState.PENDING and self._ready(run, n)
        ]
        self._finish(run, changed, now, effects)
        return effects

    def cancel(self, run_id: str, now: float) -> list[Effect]:
        """Cancel a live run: what has not started ends now; what runs is asked to stop."""
        run = self._runs[run_id]
        run.cancelling = True
        effects: list[Effect] = []
        changed = []
        for node in run.nodes.values():
            state = node.row.state
            node.retry_at = None  # a back-off ends with the run: nothing more starts
            if node.array is not None:
                changed += self._cancel_items(run, node, now, effects)
                effects += [Stop(str(i.row.call_id)) for i in self._running_items(node)]
            elif state in (NodeState.PENDING, NodeState.QUEUED):
                if state is NodeState.QUEUED:
                    effects.append(Withdraw(self._forget_call(node)))
                self._cancel_unstarted(run, node, now)
                changed.append(node)
            elif state is NodeState.RUNNING:
                effects.append(Stop(str(node.row.call_id)))
        self._finish(run, changed, now, effects)
        return effects

    def recover(
        self,
        found: list[tuple[RunRow, list[NodeRow]]],
        now: float,
        settled: dict[Ref, NodeRow] | None = None,
        held: dict[tuple[str, str], list[HeldItem]] | None = None,
    ) -> list[Effect]:
        """Take over the runs a previous engine left unfinished.

        Queued calls are queued again at their old place in line. A call that was running
        on a worker waits for it (:class:`AwaitWorker`), and so does each array item in
        ``held`` (by run and node id: those stored as running on a worker); one that ran
        in the engine's own process fails as ``EngineRestarted``, or is queued again if
        its node says ``retry_on_restart``.
        """
        effects: list[Effect] = []
        for row, node_rows in found:
            run = self._build(row, FlowSpec.model_validate(row.spec), node_rows)
            self._runs[row.id] = run
            changed = self._interrupted(run, now, effects, held or {})
            changed += self._await_results(run, settled or {}, now)
            for node in run.nodes.values():
                if node.row.state in TERMINAL_NODE_STATES - {NodeState.SUCCEEDED}:
                    changed += self._skip_dependents(run, node, now)
            for node in run.nodes.values():
                if node.row.state is NodeState.PENDING and self._ready(run, node):
                    changed.append(self._queue(run, node, node.row.queued_at or now, effects))
            self._finish(run, changed, now, effects, announce=True)
        return effects

    def _interrupted(
        self,
        run: LiveRun,
        now: float,
        effects: list[Effect],
        held: dict[tuple[str, str], list[HeldItem]],
    ) -> list[LiveNode]:
        """What a restart did to a run: its running calls are lost, its queue forgotten."""
        # A cancel is stored only as the nodes it cancelled: a run whose every node was
        # running when the cancel came is not known to have been cancelled.
        run.cancelling = any(n.row.state is NodeState.CANCELLED for n in run.nodes.values())
        changed = []
        for node in run.nodes.values():
            if node.spec.is_array and node.row.state in (NodeState.QUEUED, NodeState.RUNNING):
                kept = [] if run.cancelling else held.get((run.row.id, node.spec.id), [])
                self._array_interrupted(run, node, now, effects, kept)
            elif node.row.state is NodeState.RUNNING:
                if not run.cancelling and self._await_worker(run, node, effects):
                    continue  # running still, as far as anyone knows
                if node.spec.retry_on_restart:
                    # Run again from its start: a new attempt, so that a follower of its
                    # output is told the first one ended and reads the second from line 0.
                    node.row.state = NodeState.PENDING
                    node.row.attempt += 1
                    node.note("rerun", now, attempt=node.row.attempt, after=RESTARTED)
                else:
                    restarted = error_record(ErrorKind.ENGINE_RESTARTED, RESTARTED)
                    self._end(run, node, NodeState.FAILED, now, restarted)
                changed.append(node)
            elif node.row.state is NodeState.QUEUED:
                node.row.state = NodeState.PENDING  # queued again, at its old turn in line
        if run.cancelling:  # what has not started never will
            for node in run.nodes.values():
                if node.row.state is NodeState.PENDING:
                    self._cancel_unstarted(run, node, now)
                    changed.append(node)
        return changed

    def _cancel_unstarted(self, run: LiveRun, node: LiveNode, now: float) -> None:
        """Cancel a node whose attempt has not started: it shows the last attempt that
        did, and that attempt's duration, not a second one that never ran."""
        last_ended = node.row.ended_at
        if node.row.attempt > 1:
            node.row.attempt -= 1
        self._end(run, node, NodeState.CANCELLED, now, _cancelled())
        if last_ended is not None:
            node.row.ended_at = last_ended

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
        run, node = self._calls[call_id]
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
        run, node = self._calls[call_id]
        node.secrets = secrets
        node.row.state = NodeState.RUNNING
        run_changed = run.row.state is RunState.QUEUED
        if run_changed:
            run.row.state = RunState.RUNNING
            run.row.started_at = node.row.started_at
        effects: list[Effect] = []
        rows = [node.row] if node.row.item is None else self._item_running(run, node, effects)
        return [Save(run.row, tuple(rows), run_changed), *effects]

    def sent_ahead(self, call_id: str) -> list[Effect]:
        """The call went to a worker that holds it until a slot frees: it has not started,
        so its duration does not count the wait."""
        return self._set_start(call_id, None)

    def started(self, call_id: str, now: float) -> list[Effect]:
        """A call sent ahead left its worker's line and runs from ``now``."""
        return self._set_start(call_id, now)

    def _set_start(self, call_id: str, at: float | None) -> list[Effect]:
        found = self._calls.get(call_id)
        if found is None or found[1].row.state is not NodeState.RUNNING:
            return []  # it ended (or was queued again) meanwhile
        run, node = found
        node.row.started_at = at
        if node.row.item is not None:
            return []  # an item's start is written with its end: one write fewer each
        return [Save(run.row, (node.row,))]

    def reported(self, call_id: str, record: dict[str, Any]) -> list[Effect]:
        """The running call reported an event (``fluksio.emit``)."""
        found = self._calls.get(call_id)
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
        found = self._calls.get(call_id)
        if found is None:
            return []
        run, node = found
        before = node.row.state
        effects: list[Effect] = [Release(self._forget_call(node))]
        outcome = self._counted(run, node, outcome)
        if self._retry(run, node, outcome, now, effects):
            if node.row.item is not None:
                self._item_moved(run, node, before, now, effects)
            return effects
        row = node.row
        row.logs = redact(outcome.logs, node.secrets)
        row.events = list(node.events)
        if outcome.ok:
            row.result = redact(outcome.result, node.secrets)
            self._end(run, node, NodeState.SUCCEEDED, now)
        else:
            cancelled = (run.cancelling or node.cancelling) and (outcome.error or {}).get(
                "type"
            ) == ErrorKind.NODE_CANCELLED
            state = NodeState.CANCELLED if cancelled else NodeState.FAILED
            self._end(run, node, state, now, redact(outcome.error, node.secrets))
        node.secrets = ()
        if node.row.item is not None:
            self._item_moved(run, node, before, now, effects)
            return effects
        changed = [node]
        if row.state is NodeState.SUCCEEDED:
            if not run.cancelling:
                for dependent_id in node.dependents:
                    dependent = run.nodes[dependent_id]
                    if dependent.row.state is NodeState.PENDING and self._ready(run, dependent):
                        changed.append(self._queue(run, dependent, now, effects))
        else:
            changed += self._skip_dependents(run, node, now)
        self._finish(run, changed, now, effects)
        return effects

    def written(self, run_id: str) -> tuple[RunRow, list[NodeRow]] | None:
        """The run's rows are written; an ended run is let go (its final rows returned):
        it lives in the store now."""
        run = self._runs.get(run_id)
        if run is None or run.row.state not in TERMINAL_RUN_STATES:
            return None
        del self._runs[run_id]
        return run.row, [node.row for node in run.nodes.values()]

    # -- questions -------------------------------------------------------------------------

    def has(self, run_id: str) -> bool:
        return run_id in self._runs

    def is_over(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        return run is None or run.row.state in TERMINAL_RUN_STATES

    def snapshot(self, run_id: str) -> tuple[RunRow, list[NodeSnapshot]] | None:
        """A live run as it stands (reading it changes nothing)."""
        run = self._runs.get(run_id)
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
        found = self._calls.get(call_id)
        if found is None:
            return None
        run, node = found
        return run.row, node.spec, node.row

    def running_calls(self) -> Iterator[str]:
        for _run, node in self._calls.values():
            if node.row.state is NodeState.RUNNING:
                yield str(node.row.call_id)
