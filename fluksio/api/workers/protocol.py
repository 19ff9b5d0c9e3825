"""Protocol 2 frames from workers, validated (see ``shared/spec/protocol.md``).

Unknown keys are ignored so that a newer agent's additions never break an older engine;
what the engine relies on is required and typed. ``parallel`` is accepted as an alias of
``max_parallel``; a hello without ``version`` comes from a published 0.1.x agent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "CLOSE_SUPERSEDED",
    "PROTOCOL",
    "Answer",
    "Hello",
    "Progress",
    "ValidationError",
    "parse_worker_frame",
]

PROTOCOL = 2
CLOSE_SUPERSEDED = 4409
"""Close code for a session replaced by a newer one of the same worker: do not reconnect."""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Inventory(_Frame):
    cpus: int | None = Field(default=None, ge=0, le=1_000_000)
    gpus: int | None = Field(default=None, ge=0, le=4096)
    ram_mb: int | None = Field(default=None, ge=0)


class Hello(_Frame):
    op: Literal["hello"]
    protocol: int
    name: str = Field(min_length=1, max_length=128)
    labels: list[str] = Field(default_factory=list, max_length=64)
    python: str = Field(default="", max_length=4096)
    max_parallel: int = Field(
        default=1, ge=1, le=4096, validation_alias=AliasChoices("max_parallel", "parallel")
    )
    venv_digest: str = Field(default="", max_length=256)
    inventory: Inventory = Field(default_factory=Inventory)
    version: str | None = Field(default=None, max_length=64)
    slurm_job_id: str | None = Field(default=None, max_length=64)


class Progress(_Frame):
    call_id: str = Field(min_length=1, max_length=128)
    event: Literal["heartbeat", "emit", "yield"]
    outputs: Any = None
    ts: float | None = None


class CallError(_Frame):
    type: str = Field(default="RemoteError", max_length=256)
    message: str = ""
    short: str = ""
    traceback: str = ""


class Answer(_Frame):
    call_id: str = Field(min_length=1, max_length=128)
    ok: bool
    result: Any = None
    error: CallError | None = None
    logs: str = ""


def parse_worker_frame(payload: Any) -> Progress | Answer:
    """A frame after the hello: a progress event, or the answer that ends a call."""
    if not isinstance(payload, dict) or "call_id" not in payload:
        raise ValueError("a worker frame is a JSON object with a call_id")
    if "event" in payload:
        return Progress.model_validate(payload)
    return Answer.model_validate(payload)
