"""Frames from workers, validated against the agent's own declarations.

The frames are declared once, in :mod:`fluksio.agent.frames` (standard library
dataclasses both sides import); here pydantic ``TypeAdapter``s validate what arrives
against those declarations, and the engine adds the bounds that protect it (lengths and
counts a hostile worker could inflate). Unknown keys are ignored; ``parallel`` is accepted
as an alias of ``max_parallel``; a hello without ``version`` comes from a published 0.1.x
agent.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from fluksio.agent.frames import PROTOCOL, AnswerFrame, HelloFrame, ProgressFrame

__all__ = [
    "CLOSE_SUPERSEDED",
    "PROTOCOL",
    "FrameError",
    "ValidationError",
    "parse_hello",
    "parse_worker_frame",
    "protocol_refusal",
]

CLOSE_SUPERSEDED = 4409
"""Close code for a session replaced by a newer one of the same worker: do not reconnect."""

_HELLO: TypeAdapter[HelloFrame] = TypeAdapter(HelloFrame)
_PROGRESS: TypeAdapter[ProgressFrame] = TypeAdapter(ProgressFrame)
_ANSWER: TypeAdapter[AnswerFrame] = TypeAdapter(AnswerFrame)

_TEXT_LIMITS = {"name": 128, "python": 4096, "venv_digest": 256, "version": 64, "slurm_job_id": 64}
_MAX_LABELS = 64
_MAX_PARALLEL = 4096
_MAX_CALL_ID = 128


class FrameError(ValueError):
    """A frame that is well-formed JSON of the right shape but out of bounds; says which."""


def protocol_refusal(protocol: object) -> str | None:
    """Why a hello's protocol cannot attach, saying which side to upgrade; None if it can.

    The protocol is a whole number, compared strictly: ``2.0`` or ``"2"`` is not 2.
    """
    if type(protocol) is not int:
        return (
            f"the hello's protocol must be a whole number (this engine speaks {PROTOCOL});"
            f" it was {protocol!r}"
        )
    if protocol == PROTOCOL:
        return None
    if protocol > PROTOCOL:
        return (
            f"this worker speaks protocol {protocol}, newer than this engine's {PROTOCOL}:"
            " upgrade the engine ('pip install -U fluksio'; engines first), then attach again"
        )
    return (
        f"this engine speaks worker protocol {PROTOCOL} and this worker speaks protocol"
        f" {protocol}: upgrade it with 'pip install -U fluksio-worker' and attach again"
    )


def parse_hello(payload: dict[str, Any]) -> HelloFrame:
    """A hello, validated and bounded; raises ValidationError or FrameError naming the field."""
    if "max_parallel" not in payload and "parallel" in payload:
        payload = {**payload, "max_parallel": payload["parallel"]}
    hello = _HELLO.validate_python(payload)
    for name, limit in _TEXT_LIMITS.items():
        value = getattr(hello, name)
        if value is not None and len(value) > limit:
            raise FrameError(f"{name}: must be at most {limit} characters")
    if not hello.name:
        raise FrameError("name: must not be empty")
    if len(hello.labels) > _MAX_LABELS:
        raise FrameError(f"labels: at most {_MAX_LABELS}")
    if not 1 <= hello.max_parallel <= _MAX_PARALLEL:
        raise FrameError(f"max_parallel: must be from 1 to {_MAX_PARALLEL}")
    inventory = hello.inventory
    for name, amount in (("cpus", inventory.cpus), ("gpus", inventory.gpus)):
        if amount is not None and not 0 <= amount <= 1_000_000:
            raise FrameError(f"inventory.{name}: must be from 0 to 1000000")
    if inventory.ram_mb is not None and inventory.ram_mb < 0:
        raise FrameError("inventory.ram_mb: must not be negative")
    return hello


def parse_worker_frame(payload: Any) -> ProgressFrame | AnswerFrame:
    """A frame after the hello: a progress event, or the answer that ends a call."""
    if not isinstance(payload, dict) or "call_id" not in payload:
        raise FrameError("a worker frame is a JSON object with a call_id")
    frame: ProgressFrame | AnswerFrame = (
        _PROGRESS.validate_python(payload)
        if "event" in payload
        else _ANSWER.validate_python(payload)
    )
    if not 1 <= len(frame.call_id) <= _MAX_CALL_ID:
        raise FrameError(f"call_id: must be 1 to {_MAX_CALL_ID} characters")
    return frame
