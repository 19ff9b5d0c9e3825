"""The run machine's rules for a run whose parameters name other runs' results (a future
passed as an argument): it waits for them, with no call queued, and starts once each has
come; if one fails, what it would have run is skipped, saying which.

A part of :class:`~fluksio.engine.runs.machine.run_machine.RunMachine`, on its
:class:`~fluksio.engine.runs.machine.book.RunBook`.
"""

from __future__ import annotations

from fluksio.agent.protocol.outcome import ErrorKind, error_record
from fluksio.engine.runs.machine.book import Moves, RunBook
from fluksio.engine.runs.machine.effects import Effect
from fluksio.engine.runs.machine.references import Ref, find_results
from fluksio.engine.runs.machine.rows import NodeRow
from fluksio.engine.runs.machine.state import LiveNode, LiveRun
from fluksio.wire.states import TERMINAL_NODE_STATES, NodeState

__all__ = ["Waits"]


class Waits:
    """Runs that wait for other runs' results, and what they are told."""

    def __init__(self, book: RunBook, moves: Moves) -> None:
        self._book = book
        self._moves = moves

    def waiting_for(self, run_id: str) -> list[Ref]:
        """The results a live run still waits for."""
        run = self._book.runs.get(run_id)
        return sorted(run.waiting_for) if run is not None else []

    def await_results(
        self, run: LiveRun, settled: dict[Ref, NodeRow], now: float
    ) -> list[LiveNode]:
        """Take stock of the results the run's parameters name: those in are given, those
        to come awaited; one that failed skips the run's nodes (returned)."""
        for ref in find_results(run.row.params):
            target_run = self._book.runs.get(ref[0])
            target = target_run.nodes.get(ref[1]) if target_run is not None else None
            row = target.row if target is not None else settled.get(ref)
            if row is not None and row.state not in TERMINAL_NODE_STATES:
                run.waiting_for.add(ref)
                self._book.awaited.setdefault(ref, []).append(run.row.id)
            elif row is not None and row.state is NodeState.SUCCEEDED:
                run.given[ref] = row.result
            else:
                return self._skip_waiting(run, ref, row.state if row else "is gone", now)
        return []

    def tell_waiters(
        self, run: LiveRun, changed: list[LiveNode], now: float, effects: list[Effect]
    ) -> None:
        """Nodes of ``run`` ended: the runs that wait for their results hear of it."""
        for node in changed:
            ref = (run.row.id, node.spec.id)
            if node.row.item is not None or node.row.state not in TERMINAL_NODE_STATES:
                continue
            for waiter_id in self._book.awaited.pop(ref, []):
                waiter = self._book.runs.get(waiter_id)
                if waiter is None or ref not in waiter.waiting_for:
                    continue  # cancelled, or ended, meanwhile
                waiter.waiting_for.discard(ref)
                if node.row.state is not NodeState.SUCCEEDED:
                    skipped = self._skip_waiting(waiter, ref, node.row.state, now)
                    self._moves.finish(waiter, skipped, now, effects)
                    continue
                waiter.given[ref] = node.row.result
                queued = [
                    self._moves.queue(waiter, n, now, effects)
                    for n in waiter.nodes.values()
                    if n.row.state is NodeState.PENDING and self._book.ready(waiter, n)
                ]
                self._moves.finish(waiter, queued, now, effects)

    def _skip_waiting(self, run: LiveRun, ref: Ref, state: str, now: float) -> list[LiveNode]:
        said = f"its parameters name the result of node {ref[1]!r} of run {ref[0]}, which {state}"
        run.waiting_for.clear()
        skipped = [n for n in run.nodes.values() if n.row.state is NodeState.PENDING]
        for node in skipped:
            self._book.end(run, node, NodeState.SKIPPED, now, error_record(ErrorKind.SKIPPED, said))
        return skipped
