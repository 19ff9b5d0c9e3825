"""What a call's events and outcome become on the wire: a launcher's records as frames."""

from __future__ import annotations

import dataclasses

from fluksio.agent.launcher import CallOutcome
from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord

__all__ = ["answer_of"]

_ERROR_FIELDS = frozenset(f.name for f in dataclasses.fields(ErrorRecord))


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
