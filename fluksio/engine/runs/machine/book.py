"""The run machine's state and the rules every part of it builds on: queue a call, end a
node, skip what depended on it, save what changed and end a run.

:class:`~fluksio.engine.runs.machine.run_machine.RunMachine` owns one :class:`RunBook` and its parts
(arrays, retries, waits, restarts: :mod:`.arrays`, :mod:`.retries`, :mod:`.waits`,
:mod:`.restarts`), each given the book and, for the moves that
involve another part, the machine as :class:`Moves`: what a part may ask of the whole,
declared here once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.machine.effects import Effect, Ended, Queue, Save
from fluksio.engine.runs.machine.inputs import input_artifacts
from fluksio.engine.runs.machine.references import Ref
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.runs.machine.signature import select_kwargs
from fluksio.engine.runs.machine.state import LiveNode, LiveRun
from fluksio.scheduler import CallRequest, Container, Policy
from fluksio.wire.flows import FlowSpec
from fluksio.wire.states import (
    TERMINAL_NODE_STATES,
    TERMINAL_RUN_STATES,
    NodeState,
    RunState,
)

__all__ = ["Moves", "RunBook"]


CRASH_LIMIT = 3
"""How many times a call's worker may die under it before it is not sent to another
machine (``NodeCrashedWorkers``), unless the engine is told otherwise."""


class Moves(Protocol):
    """The moves a part of the machine asks of the whole, because another part has a say:
    queueing a node (an array opens instead), finishing a run (its waiters are told),
    an item's end (its array counts it), a call that waits for its worker, a call ended."""

    def queue(
        self, run: LiveRun, node: LiveNode, queued_at: float, effects: list[Effect]
    ) -> LiveNode: ...

    def finish(
        self,
        run: LiveRun,
        changed: list[LiveNode],
        now: float,
        effects: list[Effect],
        *,
        announce: bool = False,
    ) -> None: ...

    def item_moved(
        self, run: LiveRun, item: LiveNode, before: NodeState, now: float, effects: list[Effect]
    ) -> None: ...

    def await_worker(self, run: LiveRun, node: LiveNode, effects: list[Effect]) -> bool: ...

    def ended(self, call_id: str, outcome: CallOutcome, now: float) -> list[Effect]: ...


class RunBook:
    """The runs the machine holds, the calls it has out, and who waits for what; with the
    rules on them that need no other part."""

    def __init__(self, new_id: Callable[[], str], crash_limit: int = CRASH_LIMIT) -> None:
        """``crash_limit``: how many workers a call may see die under it (see
        :meth:`~fluksio.engine.runs.machine.retries.Retries.counted`)."""
        self.new_id = new_id
        self.crash_limit = crash_limit
        self.runs: dict[str, LiveRun] = {}
        self.calls: dict[str, tuple[LiveRun, LiveNode]] = {}
        self.awaited: dict[Ref, list[str]] = {}
        """Each result some live run waits for, and the runs that wait for it."""

    # -- the rules ---------------------------------------------------------------------------

    def build(self, row: RunRow, flow: FlowSpec, node_rows: list[NodeRow]) -> LiveRun:
        by_id = {node_row.node_id: node_row for node_row in node_rows}
        nodes = {spec.id: LiveNode(spec, by_id[spec.id]) for spec in flow.nodes}
        for node in nodes.values():
            for dependency in node.spec.after:
                nodes[dependency].dependents.append(node.spec.id)
            node.events.extend(node.row.events or [])
            node.event_count = len(node.events)
        run = LiveRun(row=row, nodes=nodes)
        run.unfinished = sum(1 for n in nodes.values() if n.row.state not in TERMINAL_NODE_STATES)
        return run

    def queue_call(
        self, run: LiveRun, node: LiveNode, queued_at: float, effects: list[Effect]
    ) -> LiveNode:
        """Queue the call of a node that is no array (or of an array's item)."""
        call_id = self.new_id()
        if node.row.item is not None:
            # Its array's items share their turn in line: the id breaks the tie, so they
            # are served in order of position.
            prefix = run.nodes[node.spec.id].array_prefix
            call_id = f"{prefix}-{node.row.item:010d}-{call_id[:8]}"
        node.row.state = NodeState.QUEUED
        node.row.error = None  # an earlier attempt's, shown while it waited to retry
        node.row.call_id = call_id
        node.row.queued_at = queued_at
        self.calls[call_id] = (run, node)
        effects.append(Queue(self.request(run, node, call_id, queued_at)))
        return node

    @staticmethod
    def request(run: LiveRun, node: LiveNode, call_id: str, queued_at: float) -> CallRequest:
        """What the scheduler is asked for the node's call ``call_id``."""
        resources = node.spec.resources
        results = {d: run.nodes[d].row.result for d in node.spec.after}
        given = {**run.row.params, **node.spec.params, **(node.item_params or {}), **results}
        arguments = select_kwargs(node.spec.code, given)
        container = node.spec.container
        return CallRequest(
            id=call_id,
            queued_at=queued_at,
            label=node.spec.worker,
            policy=Policy(node.spec.worker_policy),
            cpus=resources.cpus,
            gpus=resources.gpus,
            ram_mb=resources.ram_mb,
            limit=node.spec.limit,
            inputs=input_artifacts(arguments),
            container=None if container is None else Container(container.image, container.runtime),
        )

    def forget_call(self, node: LiveNode) -> str:
        call_id = str(node.row.call_id)
        self.calls.pop(call_id, None)
        return call_id

    @staticmethod
    def running_items(node: LiveNode) -> list[LiveNode]:
        items = node.array.items.values() if node.array is not None else ()
        return [item for item in items if item.row.state is NodeState.RUNNING]

    @staticmethod
    def end(
        run: LiveRun,
        node: LiveNode,
        state: NodeState,
        now: float,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Move a node to a terminal state, keeping the run's count of unfinished nodes."""
        if node.row.state not in TERMINAL_NODE_STATES and node.row.item is None:
            run.unfinished -= 1
        if node.row.array is not None and node.array is None and state is not NodeState.FAILED:
            summary = node.row.array  # never opened (or cancelled whole): all its items
            if not summary.counts.keys() - {NodeState.QUEUED.value}:
                summary.counts = {state.value: summary.total}
        node.row.state = state
        node.row.ended_at = now
        if error is not None:
            node.row.error = error

    def ready(self, run: LiveRun, node: LiveNode) -> bool:
        return not run.waiting_for and all(
            run.nodes[d].row.state is NodeState.SUCCEEDED for d in node.spec.after
        )

    def skip_dependents(self, run: LiveRun, node: LiveNode, now: float) -> list[LiveNode]:
        skipped = []
        for dependent_id in node.dependents:
            dependent = run.nodes[dependent_id]
            if dependent.row.state is not NodeState.PENDING:
                continue
            skipped_error = error_record(
                ErrorKind.SKIPPED, f"dependency {node.spec.id!r} {node.row.state}"
            )
            self.end(run, dependent, NodeState.SKIPPED, now, skipped_error)
            skipped.append(dependent)
            skipped += self.skip_dependents(run, dependent, now)
        return skipped

    @staticmethod
    def settle(
        run: LiveRun,
        changed: list[LiveNode],
        now: float,
        effects: list[Effect],
        *,
        announce: bool = False,
    ) -> None:
        """Save what changed, and end the run once no node is left unfinished; ``announce``
        saves the run itself even unchanged (a run taken over at a restart is news)."""
        ends = run.row.state not in TERMINAL_RUN_STATES and not run.unfinished
        if ends:
            states = {node.row.state for node in run.nodes.values()}
            if run.cancelling or NodeState.CANCELLED in states:
                run.row.state = RunState.CANCELLED
            elif states & {NodeState.FAILED, NodeState.SKIPPED}:
                run.row.state = RunState.FAILED
            else:
                run.row.state = RunState.SUCCEEDED
            run.row.ended_at = now
        if changed or ends or announce:
            effects.append(Save(run.row, tuple([n.row for n in changed]), ends or announce))
        if ends:
            effects.append(Ended(run.row))

    def cancel_unstarted(self, run: LiveRun, node: LiveNode, now: float) -> None:
        """Cancel a node whose attempt has not started: it shows the last attempt that
        did, and that attempt's duration, not a second one that never ran."""
        last_ended = node.row.ended_at
        if node.row.attempt > 1:
            node.row.attempt -= 1
        cancelled = error_record(ErrorKind.NODE_CANCELLED, "the run was cancelled")
        self.end(run, node, NodeState.CANCELLED, now, cancelled)
        if last_ended is not None:
            node.row.ended_at = last_ended
