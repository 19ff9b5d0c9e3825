"""``GET /runs/{id}/items``: an array's items, a page at a time, in order of position.

An item that has not started has no row: within a page it shows as ``queued`` (or as
its array ended: ``cancelled``, ``skipped``), so that a page is every position in its
range. Asked for one ``state``, a page holds only the items stored in it (an item not
started is found by none but ``queued``, and not listed).
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Param, Routes
from fluksio.api.routes.runs import RunBody, number
from fluksio.engine.errors import InvalidInput, NotFound
from fluksio.engine.runs.answers import item_body, run_body
from fluksio.engine.runs.items import unstarted
from fluksio.wire.answers.runs import ItemsPage
from fluksio.wire.flows import ItemsCancelRequest
from fluksio.wire.states import NodeState

__all__ = ["MAX_PAGE", "routes"]

routes = Routes()
MAX_PAGE = 10_000
"""Items in one page, at most."""


@routes.post(
    "/runs/{run_id}/items/cancel",
    summary="Cancel chosen items of a live run's array",
    auth="user",
    answer=RunBody,
    body=ItemsCancelRequest,
    errors=(404, 409, 422),
)
async def _cancel_items(call: Call[ItemsCancelRequest]) -> RunBody:
    run_id = call.request.match_info["run_id"]
    dispatcher = call.app[ENGINE].dispatcher
    return run_body(dispatcher.cancel_items(run_id, call.body.node, call.body.items))


@routes.get(
    "/runs/{run_id}/items",
    summary="An array's items, a page at a time",
    auth="user",
    answer=ItemsPage,
    errors=(404, 422),
    params=(
        Param("node", "The array node (required when the run has more than one)."),
        Param(
            "after",
            "Items after this position (default -1: from the first); the last page's next.",
            schema={"type": "integer", "minimum": -1},
        ),
        Param(
            "limit",
            f"At most this many items (1 to {MAX_PAGE}, default 1000).",
            schema={"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
        ),
        Param(
            "state",
            "Only the stored items in this state (succeeded, failed, ...).",
            schema={"enum": [s.value for s in NodeState]},
        ),
    ),
)
async def _items(call: Call[None]) -> ItemsPage:
    engine = call.app[ENGINE]
    run_id = call.request.match_info["run_id"]
    view = engine.dispatcher.view_run(run_id)
    if view is None:
        raise NotFound(f"no run with id {run_id!r}")
    arrays = {node.row.node_id: node.row for node in view.nodes if node.row.array is not None}
    if not arrays:
        raise NotFound(f"run {run_id} has no array node: its nodes' results are in the run")
    name = call.request.query.get("node")
    if name is None:
        if len(arrays) != 1:
            raise InvalidInput("node", f"name one of the run's arrays: {', '.join(arrays)}")
        name = next(iter(arrays))
    array = arrays.get(name)
    if array is None or array.array is None:
        raise NotFound(f"run {run_id} has no array node {name!r}")
    after = int(number(call.request, "after", -1, -1, 10**12))
    limit = int(number(call.request, "limit", 1000, 1, MAX_PAGE))
    raw_state = call.request.query.get("state")
    try:
        state = NodeState(raw_state) if raw_state is not None else None
    except ValueError:
        raise InvalidInput("state", f"must be one of {', '.join(NodeState)}") from None
    total = array.array.total
    rows = engine.dispatcher.items.store.page(run_id, name, after=after, limit=limit, state=state)
    if state is None:  # every position in the range, started or not
        stored = {row.item: row for row in rows}
        last = min(total - 1, after + limit)
        rows = [
            stored.get(position) or unstarted(array, position)
            for position in range(after + 1, last + 1)
        ]
    last_item = int(rows[-1].item or 0) if rows else total
    more = bool(rows) and (len(rows) == limit if state is not None else last_item < total - 1)
    return ItemsPage(
        run_id=run_id,
        node=name,
        total=total,
        items=[item_body(row) for row in rows],
        next=last_item if more else None,
    )
