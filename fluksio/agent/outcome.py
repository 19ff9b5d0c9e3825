"""How a node call ended, in the protocol's shape: plain data, shared by agent and engine.

Nothing here does I/O, so the engine's pure run machine can speak of outcomes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CallOutcome", "error_record", "limit_error"]


@dataclass
class CallOutcome:
    """How a call ended: its result or error (the protocol's error dict), and its logs."""

    ok: bool
    result: Any = None
    error: dict[str, str] | None = None
    logs: str = ""
    pid: int | None = None
    exit_status: int | None = None


def error_record(kind: str, message: str) -> dict[str, str]:
    """An error in the protocol's shape: type, message, short, traceback."""
    return {"type": kind, "message": message, "short": f"{kind}: {message}", "traceback": ""}


def limit_error(limit: float) -> dict[str, str]:
    """The error of a call stopped at its ``limit`` (wherever it was stopped)."""
    return error_record("NodeLimit", f"ran for {limit:g} s, its limit, and was stopped")
