"""How a node call ended, in the protocol's shape: plain data, shared by agent and engine.

Nothing here does I/O, so the engine's pure run machine can speak of outcomes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fluksio.agent.protocol.frames import ArtifactRef

__all__ = ["CallOutcome", "ErrorKind", "error_record", "limit_error", "memory_error"]


class ErrorKind(StrEnum):
    """The errors a call is given by the engine or the agent, not raised by its code (a
    node's own exception keeps its Python type's name). Each is a ``type`` users see."""

    WORKER_GONE = "WorkerGone"
    """Its worker went away, or was silent for ``worker_gone_s``, while it ran."""
    NOT_TAKEN = "NotTaken"
    """Sent to a worker that never took it; queued again for another."""
    NODE_LIMIT = "NodeLimit"
    """It ran for its ``limit`` and was stopped."""
    NODE_TIMEOUT = "NodeTimeout"
    """It reported nothing for its silence ``timeout`` and was stopped."""
    NODE_CANCELLED = "NodeCancelled"
    """Its run, or the call itself, was cancelled."""
    REMOTE_ERROR = "RemoteError"
    """Its process died without an answer, or the worker failed it without details."""
    SECRET_DENIED = "SecretDenied"  # noqa: S105 (an error's name, not a password)
    """It asked for a secret its place may not receive."""
    ENGINE_ERROR = "EngineError"
    """The engine could not hand it to its place."""
    ENGINE_RESTARTED = "EngineRestarted"
    """The engine restarted while it was executing."""
    SKIPPED = "Skipped"
    """A node it depends on did not succeed."""
    FRAME_TOO_LARGE = "FrameTooLarge"
    """Its worker sent a frame over the engine's size limit."""
    RESULT_TOO_LARGE = "ResultTooLarge"
    """Its process wrote a record over the launcher's size limit."""
    ITEMS_FAILED = "ItemsFailed"
    """An array node: some of its items failed (each item's error is its own)."""
    CONTAINER_ERROR = "ContainerError"
    """Its container could not be started: its runtime refused, or its image could not
    be pulled."""
    NODE_OUT_OF_MEMORY = "NodeOutOfMemory"
    """Its processes held more memory than its ``ram_mb`` (or its worker's) and were
    stopped; the worker and its other calls went on."""
    INTERRUPTED = "Interrupted"
    """Its worker was told to stop (SIGTERM: its batch job preempted, cancelled or at its
    end) and stopped it first: not its doing, so it runs again elsewhere, within its
    node's ``max_checkpoints``."""
    CHECKPOINTED = "Checkpointed"
    """It saved its state (``fluksio.checkpoint``) and ended: it runs again, on another
    job, where ``fluksio.restored()`` gives the state back, within its node's
    ``max_checkpoints``. Spends no retry."""
    NODE_CRASHED_WORKERS = "NodeCrashedWorkers"
    """Its worker died under it as many times as the engine's ``crash_limit``: it is not
    sent to another machine."""


@dataclass
class CallOutcome:
    """How a call ended: its result or error (the protocol's error dict), and its logs."""

    ok: bool
    result: Any = None
    error: dict[str, str] | None = None
    logs: str = ""
    pid: int | None = None
    exit_status: int | None = None
    interrupted: bool = False
    """Stopped by something not of its doing (its batch job's end), or ended by its own
    checkpoint: queued again, within its node's ``max_checkpoints``, without spending a
    retry."""
    checkpoint: ArtifactRef | None = None
    """The artifact reference of the state it saved with ``fluksio.checkpoint``: its next
    attempt is given it back. A call that saved one is always ``interrupted``."""
    may_run_until: float | None = None
    """Lost with its worker's connection, the call may still run there until this time
    (the worker's own deadline for a lost engine): it is not run again elsewhere before."""

    def __post_init__(self) -> None:
        self.interrupted = self.interrupted or self.checkpoint is not None


def error_record(kind: ErrorKind, message: str) -> dict[str, str]:
    """An error in the protocol's shape: type, message, short, traceback."""
    name = kind.value
    return {"type": name, "message": message, "short": f"{name}: {message}", "traceback": ""}


def limit_error(limit: float) -> dict[str, str]:
    """The error of a call stopped at its ``limit`` (wherever it was stopped)."""
    return error_record(ErrorKind.NODE_LIMIT, f"ran for {limit:g} s, its limit, and was stopped")


def memory_error(peak_bytes: int, bound_mb: int, *, own: bool) -> dict[str, str]:
    """The error of a call stopped for holding more than ``bound_mb``: its own ``ram_mb``
    (``own``), or, having set none, its worker's memory."""
    peak_mb = peak_bytes / (1 << 20)
    if own:
        said = f"over its ram_mb of {bound_mb:,} MB"
        remedy = "ask for more (resources.ram_mb) or hold less"
    else:
        said = f"over the {bound_mb:,} MB its worker has (fluksio-worker --ram-mb)"
        remedy = "give the node resources.ram_mb to be placed where that fits, or hold less"
    return error_record(
        ErrorKind.NODE_OUT_OF_MEMORY,
        f"its processes held {peak_mb:,.0f} MB, {said}, and were stopped; {remedy}",
    )
