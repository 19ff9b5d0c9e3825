"""A flow as stored, and the list's summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fluksio.api.answers.base import Answer


class FlowBody(Answer):
    name: str
    nodes: list[dict[str, Any]]
    """As stored: canonical field names (``worker``, never the ``device`` alias)."""
    created_at: datetime
    updated_at: datetime


class FlowSummary(Answer):
    name: str
    nodes: int
    updated_at: datetime
