"""The launcher and the runner between them: the conversation's version, its descriptors,
and the records a call writes on fd 3."""

from __future__ import annotations

import json
import os

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    from typing import NoReturn


PROTOCOL = 3
"""Version of the launcher <-> runner conversation (fork requests, records)."""

MAX_MESSAGE_BYTES = 1 << 17
"""Largest fork request; a spec that does not fit comes through a pipe instead."""
REAP_INTERVAL_MS = 200
SPARES = 2
"""Call processes the fork server keeps forked ahead: the next call's, and one for the
call after it while the server forks a replacement."""

EVENT_MAX_BYTES = (1 << 20) - 4096
"""The largest event ``fluksio.emit`` sends, as JSON: its frame, with the call's id around
it, stays within the wire's bound on frames that are not answers
(``fluksio.agent.protocol.frames.CONTROL_FRAME_BYTES``), checked where the node calls it."""

SPEC_FD = 0
RECORD_FD = 3


def encode_record(record: object) -> bytes:
    return (json.dumps(record, allow_nan=False, default=_refuse) + "\n").encode()


class Records:
    """Writes records to fd 3; safe from threads the node may start."""

    def __init__(self, fd: int) -> None:
        # _thread, not threading: importing threading in the fork server adds an at-fork
        # handler that costs every child over a hundred page faults.
        import _thread

        self._fd = fd
        self._lock = _thread.allocate_lock()

    def write(self, record: object) -> None:
        self.write_encoded(encode_record(record))

    def write_encoded(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


def _refuse(value: object) -> NoReturn:
    raise TypeError(f"object of type {type(value).__name__} is not JSON serializable")
