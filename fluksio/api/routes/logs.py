"""``GET /runs/{id}/logs``: a node's output from a position, live while it runs.

A running call's lines are numbered from 0 as it writes them and kept for a while in the
engine (:mod:`fluksio.engine.runs.live_logs`); once that window is gone, the node's stored
record is read instead. ``from`` and ``next`` make a follower resume exactly where it
left off after a dropped connection, and ``wait`` holds the answer until there is more.
"""

from __future__ import annotations

from typing import Literal

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Param, Routes
from fluksio.api.routes.runs import MAX_WAIT_S, number, wait_param
from fluksio.engine.errors import InvalidInput, NotFound
from fluksio.engine.runs.live_logs import Read
from fluksio.engine.runs.rows import NodeRow
from fluksio.engine.runs.views import RunView
from fluksio.wire.answers.runs import NodeLogs
from fluksio.wire.states import TERMINAL_NODE_STATES

__all__ = ["routes"]

routes = Routes()

MAX_LINES = 10_000
"""Lines in one answer, at most (ask again from ``next`` for more)."""
NOTHING_LIVE_WAIT_S = 1.0
"""How long a ``wait`` is held for a node with no lines kept live (queued, or on a
published agent, which sends its output only with its answer): then look again."""


def _stored(logs: str, position: int, ended: bool) -> Read:
    lines = logs.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not ended:
        lines = []
    position = min(position, len(lines))
    return Read(position, lines[position:], 0, len(lines) if ended else position, ended)


def _chosen(call: Call[None], view: RunView) -> tuple[str, int | None, NodeRow]:
    """The node asked for (or the run's one), the array item if one is, and its row."""
    run_id = view.row.id
    node_id = call.request.query.get("node")
    if node_id is None:
        if len(view.nodes) != 1:
            names = ", ".join(node.row.node_id for node in view.nodes)
            raise InvalidInput("node", f"the run has {len(view.nodes)} nodes: name one of {names}")
        node_id = view.nodes[0].row.node_id
    found = next((n.row for n in view.nodes if n.row.node_id == node_id), None)
    if found is None:
        raise NotFound(f"run {run_id} has no node {node_id!r}")
    item = call.request.query.get("item")
    position = None if item is None else int(number(call.request, "item", 0, 0, 1e12))
    if position is not None:
        found = call.app[ENGINE].dispatcher.item_row(run_id, node_id, position)
        if found is None:
            raise NotFound(f"run {run_id} has no item {position} of an array {node_id!r}")
    elif found.array is not None:
        raise InvalidInput("item", f"{node_id!r} is an array: name one of its items")
    return node_id, position, found


@routes.get(
    "/runs/{run_id}/logs",
    summary="A node's output from a position (live while it runs)",
    auth="user",
    answer=NodeLogs,
    errors=(404, 422),
    params=(
        Param("node", "The node (required when the run has more than one)."),
        Param(
            "item",
            "An array's item, by position (required for an array node).",
            schema={"type": "integer", "minimum": 0},
        ),
        Param(
            "from",
            "The position of the first line wanted (default 0): the last answer's next.",
            schema={"type": "integer", "minimum": 0},
        ),
        Param(
            "attempt",
            "Which attempt's lines (default: the node's latest).",
            schema={"type": "integer", "minimum": 1},
        ),
        wait_param("until there is a line at from, or the attempt ends."),
    ),
)
async def _logs(call: Call[None]) -> NodeLogs:
    run_id = call.request.match_info["run_id"]
    dispatcher = call.app[ENGINE].dispatcher
    view = dispatcher.view_run(run_id)
    if view is None:
        raise NotFound(f"no run with id {run_id!r}")
    node_id, item, found = _chosen(call, view)
    key = dispatcher.live_logs.key(node_id, item)
    position = int(number(call.request, "from", 0, 0, 1e12))
    latest = found.attempt
    attempt = int(number(call.request, "attempt", latest, 1, latest))
    wait = number(call.request, "wait", 0.0, 0.0, MAX_WAIT_S)
    live = dispatcher.live_logs
    call_id = live.call_of(run_id, key, attempt)
    read = live.read(call_id, position) if call_id is not None else None
    if read is not None and read.ended and read.next == 0 and attempt == latest:
        # An ended call whose window heard no line: a published agent sends its output
        # only with its answer, so the node's stored record holds it.
        read = None
    if call_id is not None and read is not None:
        if wait > 0 and not read.lines and not read.ended:
            await live.wait(call_id, position, wait)
            read = live.read(call_id, position) or read
        source: Literal["live", "stored"] = "live"
    else:
        node_ended = found.state in TERMINAL_NODE_STATES
        if attempt < latest:
            # An earlier attempt no longer kept: its output is gone; the record is the last's.
            read = Read(position, [], 0, position, True)
        else:
            read = _stored(found.logs, position, node_ended)
            if wait > 0 and not node_ended:
                await call.app[ENGINE].clock.sleep(min(wait, NOTHING_LIVE_WAIT_S))
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
