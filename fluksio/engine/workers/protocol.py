"""Frames from workers, validated against the agent's own declarations.

The frames are declared once, in :mod:`fluksio.agent.protocol.frames` (standard library
dataclasses both sides import); here pydantic ``TypeAdapter``s validate what arrives
against those declarations, and the engine adds the bounds that protect it (lengths and
counts a hostile worker could inflate). Unknown keys are ignored; ``parallel`` is accepted
as an alias of ``max_parallel``; a hello without ``version`` comes from a published 0.1.x
agent.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, get_args

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from fluksio.agent.declared import YEAR_AND_A_DAY_S
from fluksio.agent.protocol.frames import (
    CACHE_REPORTED,
    IMAGE_HELD,
    MAX_PIPELINE,
    PROTOCOL,
    AnswerFrame,
    ArtifactRef,
    CacheFrame,
    ContainersReport,
    HelloFrame,
    InventoryReport,
    LogFrame,
    ProgressFrame,
    StoppingFrame,
)
from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.names import NAME_RULE, is_name
from fluksio.scheduler import Containers
from fluksio.wire.flows import ContainerRuntime

__all__ = [
    "CLOSE_SUPERSEDED",
    "PROTOCOL",
    "FrameError",
    "ValidationError",
    "WorkerFrame",
    "compiled_on",
    "is_unreadable",
    "parse_hello",
    "parse_worker_frame",
    "protocol_refusal",
]

CLOSE_SUPERSEDED = 4409
"""Close code for a session replaced by a newer one of the same worker: do not reconnect."""
CLOSE_DRAINED = 4010
"""An idle worker whose batch job ends within the walltime margin: it leaves (exit 0)."""


def _kind(frame: Any) -> str:
    # The protocol's rule: a frame with an ``event`` is progress; without one it answers.
    # Our agent's lines are progress too, of a shape of their own.
    if isinstance(frame, dict) and frame.get("op") in ("cache", "stopping"):
        return str(frame["op"])
    if not isinstance(frame, dict) or "event" not in frame:
        return "answer"
    return "log" if frame["event"] == "log" else "progress"


WorkerFrame = ProgressFrame | LogFrame | AnswerFrame | CacheFrame | StoppingFrame
"""What a worker may send after its hello."""

_HELLO: TypeAdapter[HelloFrame] = TypeAdapter(HelloFrame)
_CALL_FRAME: TypeAdapter[WorkerFrame] = TypeAdapter(
    Annotated[
        Annotated[ProgressFrame, Tag("progress")]
        | Annotated[LogFrame, Tag("log")]
        | Annotated[AnswerFrame, Tag("answer")]
        | Annotated[CacheFrame, Tag("cache")]
        | Annotated[StoppingFrame, Tag("stopping")],
        Discriminator(_kind),
    ]
)
_MAX_LOG_LINES = 10_000
_MAX_LOG_LINE = 64 << 10

_TEXT_LIMITS = {
    "python": 4096,
    "python_version": 32,
    "venv_digest": 256,
    "version": 64,
    "slurm_job_id": 64,
    "host": 255,
    "instance": 64,
}
_MAX_LABELS = 64
_MAX_PARALLEL = 4096
_MAX_CALL_ID = 128
_MAX_CHECKPOINT_REF = 1024
_MAX_STOPPING_REASON = 512


class FrameError(ValueError):
    """A frame that is well-formed JSON of the right shape but out of bounds; says which."""


def protocol_refusal(protocol: object) -> str | None:
    """Why a hello's protocol cannot attach, saying which side to upgrade; None if it can.

    The protocol is a whole number, compared strictly: ``2.0`` or ``"2"`` is not 2.
    """
    if type(protocol) is not int:
        shown = repr(protocol)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return (
            f"the hello's protocol must be a whole number (this engine speaks {PROTOCOL});"
            f" it was {shown}"
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
    """A hello, validated strictly and bounded; raises ValidationError or FrameError.

    Strictly: ``"cpus": "8"`` or ``"max_parallel": 2.0`` is refused naming the field, not
    coerced. (Validated as JSON, where pydantic's strict mode takes objects for the nested
    frames.)
    """
    if "max_parallel" not in payload and "parallel" in payload:
        payload = {**payload, "max_parallel": payload["parallel"]}
    hello = _HELLO.validate_json(json.dumps(payload), strict=True)
    _check_hello_bounds(hello)
    _check_inventory(hello.inventory)
    _check_containers(hello.containers)
    return hello


def _check_hello_bounds(hello: HelloFrame) -> None:
    for name, limit in _TEXT_LIMITS.items():
        value = getattr(hello, name)
        if value is not None and len(value) > limit:
            raise FrameError(f"{name}: must be at most {limit} characters")
    if not is_name(hello.name):
        shown = hello.name if len(hello.name) <= 64 else hello.name[:64] + "..."
        raise FrameError(f"name: the worker's name {shown!r} {NAME_RULE}; pass another --name")
    if len(hello.labels) > _MAX_LABELS:
        raise FrameError(f"labels: at most {_MAX_LABELS}")
    if not 1 <= hello.max_parallel <= _MAX_PARALLEL:
        raise FrameError(f"max_parallel: must be from 1 to {_MAX_PARALLEL}")
    if not 0 <= hello.pipeline <= MAX_PIPELINE:
        raise FrameError(f"pipeline: must be from 0 to {MAX_PIPELINE}")
    if not 0 <= hello.notice_s <= YEAR_AND_A_DAY_S:  # as the agent's --notice-s allows
        raise FrameError(f"notice_s: must be from 0 to {YEAR_AND_A_DAY_S:.0f} seconds")
    resume = hello.resume or []
    most = _MAX_PARALLEL + MAX_PIPELINE
    if len(resume) > most or any(not 1 <= len(c) <= _MAX_CALL_ID for c in resume):
        raise FrameError(f"resume: at most {most} call ids of 1 to {_MAX_CALL_ID} characters")


def _check_inventory(inventory: InventoryReport) -> None:
    for name, amount in (("cpus", inventory.cpus), ("gpus", inventory.gpus)):
        if amount is not None and not 0 <= amount <= 1_000_000:
            raise FrameError(f"inventory.{name}: must be from 0 to 1000000")
    if inventory.ram_mb is not None and inventory.ram_mb < 0:
        raise FrameError("inventory.ram_mb: must not be negative")


_RUNTIMES: tuple[str, ...] = get_args(ContainerRuntime)
_MOST_IMAGES = 64
"""The most image patterns a hello may list, and held images a cache frame may."""


def _check_containers(report: ContainersReport | None) -> None:
    if report is None:
        return
    if report.runtime not in _RUNTIMES:
        raise FrameError(f"containers.runtime: must be one of {', '.join(_RUNTIMES)}")
    listed = report.images
    if len(listed) > _MOST_IMAGES or any(not 1 <= len(i) <= 512 for i in listed):
        raise FrameError(f"containers.images: at most {_MOST_IMAGES} of 1 to 512 characters")


def containers_of(report: ContainersReport | None) -> Containers | None:
    """What the scheduler knows of a worker's containers: its runtime and allowed images."""
    return None if report is None else Containers(report.runtime, tuple(report.images))


def parse_worker_frame(text: str | bytes) -> WorkerFrame:
    """A frame after the hello, from its JSON text: a progress event, or a call's answer.

    Parsed and validated in one pass (a result may be large), strictly (``"ok": "yes"`` is
    refused, not taken for true). Text that is no JSON, or nested too deeply, is a
    ValidationError of type ``json_invalid``.
    """
    frame = _CALL_FRAME.validate_json(text, strict=True)
    if isinstance(frame, CacheFrame):
        if len(frame.holds) > CACHE_REPORTED + _MOST_IMAGES or not all(map(_is_held, frame.holds)):
            raise FrameError(
                f"holds: at most {CACHE_REPORTED} digests sha256:<64 hex>"
                f" and {_MOST_IMAGES} images image:<name>"
            )
        return frame
    if isinstance(frame, StoppingFrame):
        if len(frame.reason) > _MAX_STOPPING_REASON:
            raise FrameError(f"reason: at most {_MAX_STOPPING_REASON} characters")
        return frame
    if not 1 <= len(frame.call_id) <= _MAX_CALL_ID:
        raise FrameError(f"call_id: must be 1 to {_MAX_CALL_ID} characters")
    if isinstance(frame, LogFrame) and (
        frame.first < 0
        or len(frame.lines) > _MAX_LOG_LINES
        or any(len(line) > _MAX_LOG_LINE for line in frame.lines)
    ):
        raise FrameError(
            f"lines: at most {_MAX_LOG_LINES} lines of {_MAX_LOG_LINE} characters, from a"
            " position of 0 or more"
        )
    if isinstance(frame, AnswerFrame) and frame.checkpoint is not None:
        _check_checkpoint(frame.checkpoint)
    return frame


def _check_checkpoint(ref: ArtifactRef) -> None:
    """A checkpoint is an artifact reference the engine can give back: nothing else."""
    if not _is_digest(ref.digest) or ref.size < 0:
        raise FrameError("checkpoint: an artifact reference {digest: sha256:<64 hex>, size}")
    if len(json.dumps(dataclasses.asdict(ref))) > _MAX_CHECKPOINT_REF:
        raise FrameError(f"checkpoint: at most {_MAX_CHECKPOINT_REF} characters as JSON")


def _is_held(text: str) -> bool:
    """A digest the cache holds, or an image the worker holds (of an image's length)."""
    return _is_digest(text) or (text.startswith(IMAGE_HELD) and 6 < len(text) <= 518)


def _is_digest(text: str) -> bool:
    return len(text) == 71 and text.startswith("sha256:") and all(c in _HEX for c in text[7:])


_HEX = frozenset("0123456789abcdef")


def is_unreadable(error: ValidationError) -> bool:
    """Whether the frame's text itself was unusable (no JSON, or nested too deeply)."""
    return error.errors()[0]["type"] == "json_invalid"


def compiled_on(worker: str, hello: HelloFrame, error: dict[str, str]) -> dict[str, str]:
    """A syntax error names the Python that found it: the worker's, not the engine's."""
    python = (
        f"Python {hello.python_version}"
        if hello.python_version
        else f"its Python ({hello.python or 'unknown'})"
    )
    where = f" (compiled on worker {worker} with {python})"
    return {
        **error,
        "message": error.get("message", "") + where,
        "short": error.get("short", "SyntaxError") + where,
    }


def outcome_of(frame: AnswerFrame, worker: str, hello: HelloFrame) -> CallOutcome:
    """How a call ended, as worker ``worker`` answered it: its error filled in where the
    worker gave none, a syntax error placed on its Python, a stop the worker made as it
    was stopped itself (ours: ``Interrupted``) marked as not the node's doing."""
    error = dataclasses.asdict(frame.error) if frame.error is not None else None
    if not frame.ok and error is None:
        error = error_record(
            ErrorKind.REMOTE_ERROR, "the worker reported a failure without details"
        )
    if error is not None and error.get("type") == "SyntaxError":
        error = compiled_on(worker, hello, error)
    kind = error.get("type") if error is not None else None
    # A checkpoint counts only with its error: a failure that sent one is still a failure.
    saved = frame.checkpoint if kind == ErrorKind.CHECKPOINTED and not frame.ok else None
    return CallOutcome(
        frame.ok,
        result=frame.result,
        error=error,
        logs=frame.logs,
        interrupted=kind == ErrorKind.INTERRUPTED,
        checkpoint=saved,
    )
