"""A flow as stored, and the list's summary."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from fluksio.wire.answers.base import Answer


class FlowBody(Answer):
    name: str
    nodes: list[dict[str, Any]]
    """As stored: canonical field names (``worker``, never the ``device`` alias)."""
    created_at: datetime
    updated_at: datetime
    transient: bool = False
    """Made for one script's calls (``?transient=true``; the Python executor's): the
    retention deletes it once no kept run is of it."""
    warnings: list[str] = Field(default_factory=list)
    """On ``PUT``: what the flow does that its author may not mean (a node without a
    ``limit`` bound to machines whose jobs end, say), as sentences; it was saved."""


class FlowSummary(Answer):
    name: str
    nodes: int
    updated_at: datetime
