"""``GET /openapi.json``: the API's OpenAPI 3.1 description (see ``fluksio.api.openapi``)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from fluksio.api.declare import Call, Routes
from fluksio.api.openapi import openapi_document

__all__ = ["DOCUMENT", "routes"]

DOCUMENT = web.AppKey("openapi_document", dict[str, Any])
"""Filled on the first request: the routes are all known by then, and never change."""


routes = Routes()


@routes.get("/openapi.json", auth="none", media="application/json")
async def _document(call: Call[None]) -> web.Response:
    """This API's OpenAPI 3.1 description"""
    cache = call.app[DOCUMENT]
    if not cache:
        cache["text"] = json.dumps(openapi_document(call.app), indent=1)
    return web.Response(text=cache["text"], content_type="application/json")
