"""The views the live feed keeps current, answered with the newest event they include."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from fluksio.api.appkeys import EVENTS
from fluksio.api.responses import conditional_response

__all__ = ["EVENT_ID_HEADER", "view_response"]

EVENT_ID_HEADER = "X-Fluksio-Event-Id"
"""On the views the feed keeps current: the newest event they already include."""


def view_response(
    request: web.Request, render: Callable[[], web.Response], version: str | None = None
) -> web.Response:
    """A view the feed keeps current (``conditional_response``, tagged by ``version``),
    saying in :data:`EVENT_ID_HEADER` the newest event it already includes."""
    response = conditional_response(request, render, version)
    response.headers[EVENT_ID_HEADER] = request.app[EVENTS].last_id
    return response
