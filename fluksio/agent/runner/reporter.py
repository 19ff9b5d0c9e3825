"""The module ``import fluksio`` gives node code: ``emit``, the artifacts, ``logger``,
``time_left``, ``checkpoint`` and ``restored``."""

from __future__ import annotations

import json
import os
import sys
import time

from fluksio.agent.runner.artifacts import load_artifact, save_artifact, save_owned
from fluksio.agent.runner.protocol import EVENT_MAX_BYTES, Records, encode_record

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import logging
    import types


JSON_STATE = "application/json"


class Checkpointed(BaseException):
    """Raised by ``fluksio.checkpoint`` to end the call: a ``BaseException``, as
    ``SystemExit`` is, so that a node's ``except Exception`` does not swallow it."""

    def __init__(self, ref: dict[str, object]) -> None:
        super().__init__("the call saved its state and ended, to run again from it")
        self.ref = ref


def checkpoint(state: object) -> None:
    """Save ``state`` (bytes, or anything JSON can write) and end this call as
    checkpointed: it is queued again, on another job, where ``fluksio.restored()`` gives
    the state back. It spends no retry; the node's ``max_checkpoints`` bounds how often.
    Call it when ``time_left()`` runs short, or on the notice signal."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        # Uploaded even when the engine holds it: the state must be known as this call's.
        ref = save_owned(bytes(state), name="checkpoint", owned=True)
    else:
        try:
            data = json.dumps(state).encode()
        except (TypeError, ValueError) as exc:
            said = f"fluksio.checkpoint: the state is neither bytes nor JSON: {exc}"
            raise TypeError(said) from None
        ref = save_owned(data, name="checkpoint.json", media_type=JSON_STATE, owned=True)
    raise Checkpointed(ref)


def restored_state(ref: dict[str, object] | None) -> object:
    """The state ``ref`` names (its call's ``restored``, the reference its last attempt
    saved with ``checkpoint``): bytes, or what JSON read back; None for no reference."""
    if not ref:
        return None
    with open(load_artifact(ref), "rb") as kept:
        data = kept.read()
    return json.loads(data) if ref.get("media_type") == JSON_STATE else data


def _node_logger() -> logging.Logger:
    import logging

    logger = logging.getLogger("fluksio.node")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger


def reporter_module(records: Records, saved: dict[str, object] | None) -> types.ModuleType:
    """The ``fluksio`` module a call's node imports; ``saved``: the reference of the state
    its last attempt checkpointed (its spec's ``restored``), or None."""
    import types

    module = types.ModuleType("fluksio", "The node reporter, installed by the Fluksio runner.")

    def restored() -> object:
        """The state an earlier attempt of this call last saved with ``checkpoint`` (bytes,
        or what JSON read back); None when none did."""
        return restored_state(saved)

    def emit(**outputs: object) -> None:
        record = {"kind": "event", "event": "emit", "outputs": outputs, "ts": time.time()}
        data = encode_record(record)
        if len(data) > EVENT_MAX_BYTES:
            raise ValueError(
                f"fluksio.emit: an event is at most {EVENT_MAX_BYTES} bytes as JSON and this"
                f" one is {len(data)}; save large data with fluksio.save_artifact and emit"
                " its reference"
            )
        records.write_encoded(data)

    def time_left() -> float | None:
        """Seconds until this call is stopped (its ``limit``, or its batch job's end);
        None: nothing bounds it. A call told to stop gets its notice signal too."""
        stop_at = os.environ.get("FLUKSIO_STOP_AT")
        return None if not stop_at else max(0.0, float(stop_at) - time.time())

    def __getattr__(name: str) -> object:
        # logging costs milliseconds to import: only nodes that use the logger pay it.
        if name == "logger":
            logger = _node_logger()
            module.__dict__["logger"] = logger
            return logger
        raise AttributeError(f"module 'fluksio' has no attribute {name!r}")

    module.__dict__.update(
        emit=emit,
        time_left=time_left,
        checkpoint=checkpoint,
        restored=restored,
        save_artifact=save_artifact,
        load_artifact=load_artifact,
        __getattr__=__getattr__,
        __all__=[
            "checkpoint",
            "emit",
            "load_artifact",
            "logger",
            "restored",
            "save_artifact",
            "time_left",
        ],
    )
    return module
