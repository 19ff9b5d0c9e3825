"""What a call's events and outcome become on the wire: a launcher's records as frames."""

from __future__ import annotations

import dataclasses
from typing import Any

from fluksio.agent.frames import AnswerFrame, ErrorRecord, LogFrame, ProgressFrame
from fluksio.agent.launcher import CallOutcome

__all__ = ["answer_of", "event_of"]

_ERROR_FIELDS = frozenset(f.name for f in dataclasses.fields(ErrorRecord))


def event_of(call_id: str, record: dict[str, Any]) -> ProgressFrame | LogFrame:
    """A record the launcher reported while the call ran: lines, or an event."""
    if record.get("event") == "log":
        return LogFrame(call_id=call_id, first=record["first"], lines=record["lines"])
    return ProgressFrame(
        call_id=call_id,
        event=record.get("event", "emit"),
        outputs=record.get("outputs"),
        ts=record.get("ts"),
    )


def answer_of(call_id: str, outcome: CallOutcome) -> AnswerFrame:
    """The frame that ends the call, from how it ended."""
    error = None
    if not outcome.ok:
        fields = {k: str(v) for k, v in (outcome.error or {}).items() if k in _ERROR_FIELDS}
        error = ErrorRecord(**fields)
    return AnswerFrame(
        call_id=call_id,
        ok=outcome.ok,
        result=outcome.result if outcome.ok else None,
        error=error,
        logs=outcome.logs,
        checkpoint=outcome.checkpoint,
    )
