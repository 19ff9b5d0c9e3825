"""The run machine across the engine's restart: a call that was running on a worker
waits for that worker to come back naming it, and is adopted, exactly once; or it is
given up on.

A part of :class:`~fluksio.engine.runs.machine.run_machine.RunMachine`, on its
:class:`~fluksio.engine.runs.machine.book.RunBook`. The window a call waits and
who came back are its owner's to tell (the dispatcher's awaiting table); the machine
only keeps the node running meanwhile, so that nothing else of its run moves on a
result that is still to come.
"""

from __future__ import annotations

from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.machine.arrays import Arrays
from fluksio.engine.runs.machine.book import Moves, RunBook
from fluksio.engine.runs.machine.effects import AwaitWorker, Effect, Progress, Release
from fluksio.engine.runs.machine.references import Ref
from fluksio.engine.runs.machine.rows import HeldItem, NodeRow, RunRow
from fluksio.engine.runs.machine.state import LiveNode, LiveRun
from fluksio.engine.runs.machine.waits import Waits
from fluksio.wire.flows import FlowSpec
from fluksio.wire.states import TERMINAL_NODE_STATES, NodeState

__all__ = ["ENGINE_PLACE", "RESTARTED", "Restarts"]

ENGINE_PLACE = "engine"
"""The place name of calls run in the engine's own process: they die with it."""
RESTARTED = "the engine restarted while this node was executing"


class Restarts:
    """What a restart leaves: runs taken over, calls that wait for their worker."""

    def __init__(self, book: RunBook, moves: Moves, arrays: Arrays, waits: Waits) -> None:
        self._book = book
        self._moves = moves
        self._arrays = arrays
        self._waits = waits

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
            run = self._book.build(row, FlowSpec.model_validate(row.spec), node_rows)
            self._book.runs[row.id] = run
            changed = self._interrupted(run, now, effects, held or {})
            changed += self._waits.await_results(run, settled or {}, now)
            for node in run.nodes.values():
                if node.row.state in TERMINAL_NODE_STATES - {NodeState.SUCCEEDED}:
                    changed += self._book.skip_dependents(run, node, now)
            for node in run.nodes.values():
                if node.row.state is NodeState.PENDING and self._book.ready(run, node):
                    changed.append(self._moves.queue(run, node, node.row.queued_at or now, effects))
            self._moves.finish(run, changed, now, effects, announce=True)
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
                self._arrays.interrupted(run, node, now, effects, kept)
            elif node.row.state is NodeState.RUNNING:
                if not run.cancelling and self.await_worker(run, node, effects):
                    continue  # running still, as far as anyone knows
                if node.spec.retry_on_restart:
                    # Run again from its start: a new attempt, so that a follower of its
                    # output is told the first one ended and reads the second from line 0.
                    node.row.state = NodeState.PENDING
                    node.row.attempt += 1
                    node.note("rerun", now, attempt=node.row.attempt, after=RESTARTED)
                else:
                    restarted = error_record(ErrorKind.ENGINE_RESTARTED, RESTARTED)
                    self._book.end(run, node, NodeState.FAILED, now, restarted)
                changed.append(node)
            elif node.row.state is NodeState.QUEUED:
                node.row.state = NodeState.PENDING  # queued again, at its old turn in line
        if run.cancelling:  # what has not started never will
            for node in run.nodes.values():
                if node.row.state is NodeState.PENDING:
                    self._book.cancel_unstarted(run, node, now)
                    changed.append(node)
        return changed

    def adopted(self, call_id: str, secrets: tuple[str, ...], now: float) -> list[Effect]:
        """Its worker came back naming the call: it goes on there, and its answer (with
        ``secrets`` blanked, as when it was placed) ends it as any call's does."""
        found = self._book.calls.get(call_id)
        if found is None:
            return []
        run, node = found
        node.secrets = secrets
        node.note("adopted", now, worker=node.row.place, after=RESTARTED)
        return [Progress(run.row, node.row, node.event_count)]

    def not_back(self, call_id: str, error: dict[str, str], now: float) -> list[Effect]:
        """The call will not be adopted (``error`` says why): a node that says
        ``retry_on_restart`` runs it again from its start, as a new attempt; any other
        ends with ``error``, retried as its policy says of that kind."""
        found = self._book.calls.get(call_id)
        if found is None:
            return []
        run, node = found
        if not node.spec.retry_on_restart or run.cancelling:
            return self._moves.ended(call_id, CallOutcome(False, error=error), now)
        before = node.row.state
        effects: list[Effect] = [Release(self._book.forget_call(node))]
        node.row.state = NodeState.PENDING
        node.row.attempt += 1
        node.note("rerun", now, attempt=node.row.attempt, after=error.get("message", RESTARTED))
        changed = [self._moves.queue(run, node, node.row.queued_at or now, effects)]
        if node.row.item is not None:
            self._moves.item_moved(run, node, before, now, effects)  # its array's counts; saves it
        else:
            self._moves.finish(run, changed, now, effects)
        return effects

    def await_worker(self, run: LiveRun, node: LiveNode, effects: list[Effect]) -> bool:
        """At a restart: the node's call ran on a worker, so it may still; it stays
        running and waits for that worker (True). False: it ran in the engine's process."""
        place, call_id = node.row.place, node.row.call_id
        if place in (None, ENGINE_PLACE) or call_id is None:
            return False
        self._book.calls[call_id] = (run, node)
        queued_at = node.row.queued_at or node.row.started_at or 0.0
        gpu_ids = node.row.provenance.gpu_ids if node.row.provenance is not None else ()
        request = self._book.request(run, node, call_id, queued_at)
        effects.append(AwaitWorker(request, place, tuple(gpu_ids), node.row.holder))
        return True
