"""Answers made from response models: each shape declared once, serialised by pydantic."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence

from aiohttp import web
from pydantic import BaseModel

__all__ = ["conditional_response", "model_response"]

# Versions count from zero in each engine process: without this, a tag from before a
# restart could match a different view after it.
_EPOCH = secrets.token_hex(4)


def model_response(
    body: BaseModel | Sequence[BaseModel], *, status: int = 200, exclude_none: bool = False
) -> web.Response:
    """``body`` as a JSON answer, times in ISO 8601 (UTC, ``Z``).

    ``exclude_none`` leaves out fields that are null (for answers whose optional fields
    are absent rather than null).
    """
    if isinstance(body, BaseModel):
        text = body.model_dump_json(exclude_none=exclude_none)
    else:
        items = (item.model_dump_json(exclude_none=exclude_none) for item in body)
        text = "[" + ",".join(items) + "]"
    return web.Response(text=text, status=status, content_type="application/json")


def conditional_response(
    request: web.Request, render: Callable[[], web.Response], version: str | None = None
) -> web.Response:
    """``render()``, or ``304 Not Modified`` when the client's ``If-None-Match`` is current.

    With a ``version`` (a few counters that change whenever the view does), an unchanged
    view costs a comparison: nothing is built. Its tag is weak, since only heartbeat
    times may differ between two answers under it. Without one, the answer is built
    and its tag is the hash of its bytes, which saves only the transfer.
    """
    asked = {tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")}
    tag = f'W/"{_EPOCH}-{version}"' if version is not None else None
    if tag is not None and tag in asked:
        return _not_modified(tag)
    response = render()
    if tag is None:
        body = response.body if isinstance(response.body, bytes) else b""
        tag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
        if tag in asked or f"W/{tag}" in asked:
            return _not_modified(tag)
    response.headers["ETag"] = tag
    response.headers["Cache-Control"] = "no-cache"
    return response


def _not_modified(tag: str) -> web.Response:
    return web.Response(status=304, headers={"ETag": tag, "Cache-Control": "no-cache"})
