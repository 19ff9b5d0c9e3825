"""``GET /runs/{id}/logs``: a node's output from a position, live while it runs.

The engine answers (:mod:`fluksio.engine.front.logs`); ``from`` and ``next`` make a
follower resume exactly where it left off after a dropped connection, and ``wait`` holds
the answer until there is more.
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Param, Routes
from fluksio.api.routes.runs import MAX_WAIT_S, number, wait_param
from fluksio.wire.answers.runs import NodeLogs

__all__ = ["routes"]

routes = Routes()


@routes.get(
    "/runs/{run_id}/logs",
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
    """A node's output from a position (live while it runs)"""
    query = call.request.query
    item = None if query.get("item") is None else int(number(call.request, "item", 0, 0, 1e12))
    attempt = None if query.get("attempt") is None else number(call.request, "attempt", 1, 1, 1e12)
    return await call.app[ENGINE].logs(
        call.request.match_info["run_id"],
        query.get("node"),
        item=item,
        start=int(number(call.request, "from", 0, 0, 1e12)),
        attempt=None if attempt is None else int(attempt),
        wait_s=number(call.request, "wait", 0.0, 0.0, MAX_WAIT_S),
    )
