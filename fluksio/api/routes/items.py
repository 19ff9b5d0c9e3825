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
from fluksio.errors import InvalidInput
from fluksio.wire.answers.runs import ItemsPage
from fluksio.wire.flows import ItemsCancelRequest
from fluksio.wire.states import NodeState

__all__ = ["MAX_PAGE", "routes"]

routes = Routes()
MAX_PAGE = 10_000
"""Items in one page, at most."""


@routes.post(
    "/runs/{run_id}/items/cancel",
    auth="user",
    answer=RunBody,
    body=ItemsCancelRequest,
    errors=(404, 409, 422),
)
async def _cancel_items(call: Call[ItemsCancelRequest]) -> RunBody:
    """Cancel chosen items of a live run's array"""
    run_id = call.request.match_info["run_id"]
    return call.app[ENGINE].cancel_items(run_id, call.body.node, call.body.items)


@routes.get(
    "/runs/{run_id}/items",
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
    """An array's items, a page at a time"""
    after = int(number(call.request, "after", -1, -1, 10**12))
    limit = int(number(call.request, "limit", 1000, 1, MAX_PAGE))
    raw_state = call.request.query.get("state")
    try:
        state = NodeState(raw_state) if raw_state is not None else None
    except ValueError:
        raise InvalidInput("state", f"must be one of {', '.join(NodeState)}") from None
    return call.app[ENGINE].items_page(
        call.request.match_info["run_id"],
        call.request.query.get("node"),
        after=after,
        limit=limit,
        state=state,
    )
