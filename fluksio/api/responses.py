"""Answers made from response models: each shape declared once, serialised by pydantic."""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web
from pydantic import BaseModel

__all__ = ["Deleted", "model_response"]


class Deleted(BaseModel):
    """The answer to a delete: the name of what is gone."""

    deleted: str


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
