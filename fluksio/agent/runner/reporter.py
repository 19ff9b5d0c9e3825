"""The module ``import fluksio`` gives node code: ``emit``, the artifacts, ``logger``,
``time_left``."""

from __future__ import annotations

import os
import sys
import time

from fluksio.agent.runner.artifacts import load_artifact, save_artifact
from fluksio.agent.runner.protocol import EVENT_MAX_BYTES, Records, encode_record

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import logging
    import types


def _node_logger() -> logging.Logger:
    import logging

    logger = logging.getLogger("fluksio.node")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger


def reporter_module(records: Records) -> types.ModuleType:
    import types

    module = types.ModuleType("fluksio", "The node reporter, installed by the Fluksio runner.")

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
        save_artifact=save_artifact,
        load_artifact=load_artifact,
        __getattr__=__getattr__,
        __all__=["emit", "load_artifact", "logger", "save_artifact", "time_left"],
    )
    return module
