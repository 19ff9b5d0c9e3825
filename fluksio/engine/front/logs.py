"""A node's output from a position, live while it runs, as the engine answers it.

A running call's lines are numbered from 0 as it writes them and kept for a while in the
engine (:mod:`fluksio.engine.runs.live_logs`); once that window is gone, the node's stored
record is read instead. A part of :class:`~fluksio.engine.front.engine.Engine`; the route
(``GET /runs/{id}/logs``) asks :meth:`LogsAsked.logs` and hands the answer out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from fluksio.engine.runs.live_logs import Read
from fluksio.engine.runs.machine.rows import NodeRow
from fluksio.engine.runs.views import RunView
from fluksio.errors import InvalidInput, NotFound
from fluksio.wire.answers.runs import NodeLogs
from fluksio.wire.states import TERMINAL_NODE_STATES

if TYPE_CHECKING:
    from fluksio.clock import Clock
    from fluksio.engine.dispatch.dispatcher import Dispatcher

__all__ = ["MAX_LINES", "LogsAsked"]

MAX_LINES = 10_000
"""Lines in one answer, at most (ask again from ``next`` for more)."""
NOTHING_LIVE_WAIT_S = 1.0
"""How long a ``wait`` is held for a node with no lines kept live (queued, or on a
published agent, which sends its output only with its answer): then look again."""


class LogsAsked:
    def __init__(self, *, dispatcher: Dispatcher, clock: Clock) -> None:
        self._dispatcher = dispatcher
        self._clock = clock

    async def logs(
        self,
        run_id: str,
        node: str | None,
        *,
        item: int | None,
        start: int,
        attempt: int | None,
        wait_s: float,
    ) -> NodeLogs:
        """The lines of ``node`` (the run's one, if it has one) or of an array's ``item``
        from position ``start``, of ``attempt`` (default: the latest); ``wait_s``: held
        until there is a line at ``start``, or the attempt ends."""
        dispatcher = self._dispatcher
        view = dispatcher.view_run(run_id)
        if view is None:
            raise NotFound(f"no run with id {run_id!r}")
        node_id, found = self._chosen(view, node, item)
        latest = found.attempt
        if attempt is None:
            attempt = latest
        elif attempt > latest:
            raise InvalidInput("attempt", f"must be a number from 1 to {latest}")
        live = dispatcher.live_logs
        call_id = live.call_of(run_id, live.key(node_id, item), attempt)
        read = live.read(call_id, start) if call_id is not None else None
        if call_id is not None and read is not None:
            if wait_s > 0 and not read.lines and not read.ended:
                await live.wait(call_id, start, wait_s)
                read = live.read(call_id, start) or read
            if read.ended and attempt == latest and _heard_less(read, found.logs):
                read = None  # decided after the wait: the call may have ended in it
        source: Literal["live", "stored"]
        if call_id is not None and read is not None:
            source = "live"
        else:
            node_ended = found.state in TERMINAL_NODE_STATES
            if attempt < latest:
                # An earlier attempt no longer kept: its output is gone; the record is the
                # last's.
                read = Read(start, [], 0, start, True)
            else:
                read = _stored(found.logs, start, node_ended)
                if wait_s > 0 and not node_ended:
                    await self._clock.sleep(min(wait_s, NOTHING_LIVE_WAIT_S))
            source = "stored"
        lines = read.lines[:MAX_LINES]
        complete = len(lines) == len(read.lines)
        return NodeLogs(
            run_id=run_id,
            node=node_id,
            item=item,
            attempt=attempt,
            latest_attempt=latest,
            state=found.state,
            first=read.first,
            lines=lines,
            missed=read.missed,
            next=read.next if complete else read.first + len(lines),
            ended=read.ended and complete,
            source=source,
        )

    def _chosen(self, view: RunView, node: str | None, item: int | None) -> tuple[str, NodeRow]:
        """The node asked for (or the run's one) and its row, or its item's."""
        run_id = view.row.id
        if node is None:
            if len(view.nodes) != 1:
                names = ", ".join(n.row.node_id for n in view.nodes)
                raise InvalidInput(
                    "node", f"the run has {len(view.nodes)} nodes: name one of {names}"
                )
            node = view.nodes[0].row.node_id
        found = next((n.row for n in view.nodes if n.row.node_id == node), None)
        if found is None:
            raise NotFound(f"run {run_id} has no node {node!r}")
        if item is not None:
            found = self._dispatcher.item_row(run_id, node, item)
            if found is None:
                raise NotFound(f"run {run_id} has no item {item} of an array {node!r}")
        elif found.array is not None:
            raise InvalidInput("item", f"{node!r} is an array: name one of its items")
        return node, found


def _heard_less(read: Read, logs: str) -> bool:
    """Whether an ended call's window heard less than its stored record holds: no line at
    all (a published agent sends its output only with its answer), or not those before
    its first (an adopted call's lines went to the engine before the restart). Then the
    record is read instead, if it has every line the window counted."""
    if read.next != 0 and read.missed == 0:
        return False
    return _stored(logs, 0, True).next >= read.next


def _stored(logs: str, position: int, ended: bool) -> Read:
    lines = logs.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not ended:
        lines = []
    position = min(position, len(lines))
    return Read(position, lines[position:], 0, len(lines) if ended else position, ended)
