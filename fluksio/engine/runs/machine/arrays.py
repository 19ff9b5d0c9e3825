"""The run machine's rules for arrays: one node, many items, each a call of its own.

An array node holds its items' counts by state, not its items: only those in line (a
window of :data:`WINDOW`, taken from their source as the line shortens, by a
:class:`~fluksio.engine.runs.machine.effects.Refill`), running, or waiting out a back-off are in
memory, each as a :class:`~fluksio.engine.runs.machine.state.LiveNode` of its own whose
row names its item. An item's row is written once it has started; one with no row has
not (its parameters are still only in its source). The rest of a call's life (placed,
running, reported, retried) is the machine's, as for any node.

A part of :class:`~fluksio.engine.runs.machine.run_machine.RunMachine`, on its
:class:`~fluksio.engine.runs.machine.book.RunBook`.
"""

from __future__ import annotations

from typing import Any

from fluksio.agent.protocol.outcome import ErrorKind, error_record
from fluksio.engine.runs.machine.book import Moves, RunBook
from fluksio.engine.runs.machine.effects import (
    CancelledAhead,
    Effect,
    ItemsInterrupted,
    Refill,
    Stop,
    Withdraw,
)
from fluksio.engine.runs.machine.rows import ArraySummary, Earlier, HeldItem, NodeRow
from fluksio.engine.runs.machine.state import LiveArray, LiveNode, LiveRun
from fluksio.wire.states import TERMINAL_NODE_STATES, NodeState

__all__ = ["FAILURES_KEPT", "SUMMARY_EVERY_S", "WINDOW", "Arrays"]

WINDOW = 1024
"""The most items of one array in line at once: what the scheduler holds of it."""
SUMMARY_EVERY_S = 1.0
"""How often, at most, an array's counts are written (and told to the live feed) while
its items end; a change of its own state is written at once."""
FAILURES_KEPT = 5
"""The first failed items an array's summary names."""


def _counted(state: NodeState) -> str:
    """An item's state as its array counts it: one waiting out a back-off is in line."""
    return NodeState.QUEUED.value if state is NodeState.PENDING else state.value


class Arrays:
    """An array node's items: read a window at a time, counted as they end."""

    def __init__(self, book: RunBook, moves: Moves) -> None:
        self._book = book
        self._moves = moves

    # -- questions -------------------------------------------------------------------------

    def item_row(self, run_id: str, node_id: str, position: int) -> NodeRow | None:
        """A live array's item in memory (in line, running, or waiting to retry)."""
        run = self._book.runs.get(run_id)
        node = run.nodes.get(node_id) if run is not None else None
        item = node.array.items.get(position) if node is not None and node.array else None
        return item.row if item is not None else None

    def items_waiting(self, run_id: str, node_id: str) -> int:
        """How many of an array's items wait (in line, unread, or to retry)."""
        run = self._book.runs.get(run_id)
        node = run.nodes.get(node_id) if run is not None else None
        summary = node.row.array if node is not None else None
        return summary.counts.get(NodeState.QUEUED.value, 0) if summary is not None else 0

    # -- the array node --------------------------------------------------------------------

    def open(
        self, run: LiveRun, node: LiveNode, queued_at: float, effects: list[Effect]
    ) -> LiveNode:
        """The array's turn has come: its items go in line, a window at a time."""
        summary = node.row.array
        assert summary is not None
        if node.array is None:  # else made at a restart, holding the items on workers
            node.array = LiveArray(summary)
        node.array_prefix = node.array_prefix or self._book.new_id()
        started = sum(n for state, n in summary.counts.items() if state != NodeState.QUEUED)
        node.row.state = NodeState.RUNNING if started else NodeState.QUEUED
        node.row.queued_at = queued_at
        self._want_items(run, node, effects)
        return node

    def refilled(
        self,
        run_id: str,
        node_id: str,
        found: list[tuple[int, dict[str, Any], Earlier]],
        cursor: int,
        now: float,
    ) -> list[Effect]:
        """The items asked for by a :class:`Refill`: ``(position, parameters, how it
        stands)`` of each still to run, and where the next ask starts."""
        run = self._book.runs.get(run_id)
        node = run.nodes.get(node_id) if run is not None else None
        array = node.array if node is not None else None
        if run is None or node is None or array is None or run.cancelling:
            return []
        array.loading = False
        array.cursor = cursor
        array.cancelled_ahead.drop_below(cursor)
        array.exhausted = cursor >= array.summary.total
        effects: list[Effect] = []
        for position, params, earlier in found:
            if position in array.cancelled_ahead:
                continue
            row = NodeRow(
                node.spec.id,
                NodeState.PENDING,
                item=position,
                attempt=earlier.attempt,
                interruptions=earlier.interruptions,
                crashes=earlier.crashes,
                checkpoint=earlier.checkpoint,
            )
            item = array.items[position] = LiveNode(node.spec, row, item_params=params)
            array.in_line += 1
            self._moves.queue(run, item, node.row.queued_at or now, effects)
        if array.exhausted and not array.items:
            self._array_done(run, node, now)
            self._moves.finish(run, [node], now, effects)
        return effects

    def cancel_items(
        self, run_id: str, node_id: str, positions: list[int], now: float
    ) -> tuple[list[Effect], int]:
        """Cancel chosen items of a live array: those waiting never run, those running are
        asked to stop (and end cancelled); those over are left as they are. How many
        were cancelled."""
        run = self._book.runs.get(run_id)
        node = run.nodes.get(node_id) if run is not None else None
        array = node.array if node is not None else None
        if run is None or node is None or array is None:
            return [], 0
        effects: list[Effect] = []
        changed: list[LiveNode] = []
        unread: list[int] = []
        for position in sorted(set(positions)):
            item = array.items.get(position)
            if item is not None:
                if self._cancel_read_item(array, position, item, now, effects):
                    changed.append(item)
            elif array.cursor <= position < array.summary.total:
                unread.append(position)  # not read yet (one over already is left as it is)
        ahead = array.cancelled_ahead.add(unread)
        ahead_count = sum(high - low + 1 for low, high in ahead)
        _move(array.summary, NodeState.QUEUED, NodeState.CANCELLED, ahead_count)
        stops = sum(1 for e in effects if isinstance(e, Stop))
        cancelled = len(changed) + ahead_count + stops
        if array.summary.counts.get(NodeState.QUEUED.value, 0) == 0 and not array.items:
            array.exhausted = True  # nothing left to read: every unread one was cancelled
        if not array.items and array.exhausted:
            self._array_done(run, node, now)
            changed.append(node)
        self._want_items(run, node, effects)
        if ahead:
            effects.append(CancelledAhead(run_id, node_id, tuple(ahead), now))
        self._moves.finish(run, changed, now, effects)
        return effects, cancelled

    def _cancel_read_item(
        self, array: LiveArray, position: int, item: LiveNode, now: float, effects: list[Effect]
    ) -> bool:
        """Cancel an item read into the machine: one running is asked to stop (and ends
        cancelled when it has); one in line or waiting out a back-off ends now (True)."""
        if item.row.state is NodeState.RUNNING:
            item.cancelling = True
            effects.append(Stop(str(item.row.call_id)))
            return False
        if item.row.state is NodeState.QUEUED:
            effects.append(Withdraw(self._book.forget_call(item)))
            array.in_line -= 1
        _move(array.summary, item.row.state, NodeState.CANCELLED)
        item.row.state, item.row.ended_at, item.retry_at = NodeState.CANCELLED, now, None
        del array.items[position]
        return True

    def _want_items(self, run: LiveRun, node: LiveNode, effects: list[Effect]) -> None:
        array = node.array
        assert array is not None
        if array.loading or array.exhausted or run.cancelling or array.in_line > WINDOW // 2:
            return
        array.loading = True
        wanted = WINDOW - array.in_line
        effects.append(
            Refill(run.row.id, node.spec, array.cursor, wanted, array.summary.total, array.in_line)
        )

    # -- its items -------------------------------------------------------------------------

    def item_running(self, run: LiveRun, item: LiveNode, effects: list[Effect]) -> list[NodeRow]:
        """An item's call was handed to its executor: the rows that changed with it."""
        node = run.nodes[item.spec.id]
        array = node.array
        assert array is not None
        array.in_line -= 1
        _move(array.summary, NodeState.QUEUED, NodeState.RUNNING)
        self._want_items(run, node, effects)
        if node.row.state is NodeState.QUEUED:
            node.row.state = NodeState.RUNNING
            return [item.row, node.row]
        return [item.row]

    def item_moved(
        self, run: LiveRun, item: LiveNode, before: NodeState, now: float, effects: list[Effect]
    ) -> None:
        """An item's call ended: it is queued again (a retry), or it is over."""
        node = run.nodes[item.spec.id]
        array = node.array
        assert array is not None and item.row.item is not None
        if before is NodeState.QUEUED and item.row.state is not NodeState.QUEUED:
            array.in_line -= 1  # ended without starting: refused a secret, say
        elif item.row.state is NodeState.QUEUED and before is not NodeState.QUEUED:
            array.in_line += 1  # retried at once
        _move(array.summary, before, item.row.state)
        changed = [item]
        if item.row.state in TERMINAL_NODE_STATES:
            del array.items[item.row.item]
            if item.row.state is NodeState.FAILED:
                _note_failure(array.summary, item.row)
            self._want_items(run, node, effects)
        if not array.items and (array.exhausted or run.cancelling):
            self._array_done(run, node, now)
            changed.append(node)
        elif now - array.told_at >= SUMMARY_EVERY_S:
            array.told_at = now
            changed.append(node)
        self._moves.finish(run, changed, now, effects)

    def cancel_all(
        self, run: LiveRun, node: LiveNode, now: float, effects: list[Effect]
    ) -> list[LiveNode]:
        """Cancel an array: what is in line leaves it, what runs is asked to stop (by the
        caller); what never left its source is counted cancelled. The nodes that changed
        (the array among them once it is over)."""
        array = node.array
        assert array is not None
        changed: list[LiveNode] = []
        for item in list(array.items.values()):
            if item.row.state is NodeState.QUEUED:
                effects.append(Withdraw(str(item.row.call_id)))
                self._book.forget_call(item)
                array.in_line -= 1
            elif item.row.state is not NodeState.PENDING:
                continue  # running: it ends as its executor stops it
            _move(array.summary, item.row.state, NodeState.CANCELLED)
            del array.items[int(item.row.item or 0)]
            item.row.state = NodeState.CANCELLED
            item.row.ended_at = now
            item.retry_at = None
            changed.append(item)
        unread = array.summary.counts.pop(NodeState.QUEUED.value, 0)
        if unread:
            array.summary.counts[NodeState.CANCELLED.value] = (
                array.summary.counts.get(NodeState.CANCELLED.value, 0) + unread
            )
        array.exhausted = True
        if not array.items:
            self._array_done(run, node, now)
            changed.append(node)
        return changed

    def interrupted(
        self,
        run: LiveRun,
        node: LiveNode,
        now: float,
        effects: list[Effect],
        held: list[HeldItem],
    ) -> None:
        """A restart: the items ``held`` on workers may run there still, and each awaits
        its worker, as a node's call does; the others that were running (in the engine's
        process) are lost. As for a node: run again (``retry_on_restart``) or failed; the
        array goes back in line from its first item not yet over."""
        summary = node.row.array
        assert summary is not None
        rerun = node.spec.retry_on_restart
        error = None if rerun else error_record(ErrorKind.ENGINE_RESTARTED, _RESTARTED)
        lost = summary.counts.get(NodeState.RUNNING.value, 0) - len(held)
        if lost > 0:
            effects.append(
                ItemsInterrupted(node.row, run.row.id, error, now, spare_held=bool(held))
            )
            after = NodeState.QUEUED if rerun else NodeState.FAILED
            _move(summary, NodeState.RUNNING, after, lost)
        node.row.state = NodeState.PENDING
        if held:
            node.array = LiveArray(summary)
            for row, params in held:
                assert row.item is not None
                item = node.array.items[row.item] = LiveNode(node.spec, row, item_params=params)
                self._moves.await_worker(run, item, effects)

    def _array_done(self, run: LiveRun, node: LiveNode, now: float) -> None:
        """Every item is over: so is the array (its caller saves it)."""
        summary = node.row.array
        assert summary is not None
        node.array = None
        failed = summary.counts.get(NodeState.FAILED.value, 0)
        if failed:
            first: dict[str, Any] = (
                summary.failures[0] if summary.failures else {"item": "?", "error": {}}
            )
            said = first["error"].get("short") or first["error"].get("message", "")
            message = f"{failed} of {summary.total} items failed; the first, item"
            error = error_record(ErrorKind.ITEMS_FAILED, f"{message} {first['item']}: {said}")
            self._book.end(run, node, NodeState.FAILED, now, error)
        elif summary.counts.get(NodeState.CANCELLED.value) or run.cancelling:
            cancelled = error_record(ErrorKind.NODE_CANCELLED, _CANCEL)
            self._book.end(run, node, NodeState.CANCELLED, now, cancelled)
        else:
            self._book.end(run, node, NodeState.SUCCEEDED, now)


_RESTARTED = "the engine restarted while this item was executing"
_CANCEL = "the run was cancelled"


def _move(summary: ArraySummary, before: NodeState, after: NodeState, count: int = 1) -> None:
    old, new = _counted(before), _counted(after)
    if old == new:
        return
    counts = summary.counts
    counts[old] = counts.get(old, 0) - count
    if counts[old] <= 0:
        del counts[old]
    counts[new] = counts.get(new, 0) + count


def _note_failure(summary: ArraySummary, row: NodeRow) -> None:
    if len(summary.failures) < FAILURES_KEPT:
        error = row.error or {}
        kept = {key: error[key] for key in ("type", "message", "short") if key in error}
        summary.failures.append({"item": row.item, "error": kept})
