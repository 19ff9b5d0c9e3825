"""Answers made from response models: each shape declared once, serialised by pydantic."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web
from pydantic import BaseModel

__all__ = ["model_response"]


def model_response(body: BaseModel | Sequence[BaseModel], *, status: int = 200) -> web.Response:
    """``body`` as a JSON answer, times in ISO 8601 (UTC, ``Z``)."""
    if isinstance(body, BaseModel):
        text = body.model_dump_json()
    else:
        text = "[" + ",".join(item.model_dump_json() for item in body) + "]"
    return web.Response(text=text, status=status, content_type="application/json")
