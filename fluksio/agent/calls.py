"""One call as the launcher follows it: its spec, its bounded output, the records it writes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fluksio.agent.clock import Clock
from fluksio.agent.errors import AgentError
from fluksio.agent.live_output import LiveOutput
from fluksio.agent.protocol.frames import LogFrame, ProgressFrame, RunFrame
from fluksio.agent.protocol.outcome import ErrorKind, error_record

__all__ = [
    "LOG_LIMIT_BYTES",
    "NOTICE_CAUGHT",
    "NOTICE_S",
    "NOTICE_SHARE",
    "NOTICE_SIGNALS",
    "RECORD_LIMIT_BYTES",
    "EndedBy",
    "EventCallback",
    "LauncherError",
    "Notice",
    "RunningCall",
    "Signal",
    "fitted_notice",
    "resolve_interpreter",
]

LOG_LIMIT_BYTES = 1 << 20
RECORD_LIMIT_BYTES = 64 << 20

EventCallback = Callable[[ProgressFrame | LogFrame], None]


def fitted_notice(job_s: float | None) -> float:
    """The notice a job of ``job_s`` seconds (None: one that does not end) gives by
    default: :data:`NOTICE_S`, at most a quarter of the job."""
    return NOTICE_S if job_s is None else max(0.0, min(NOTICE_S, job_s / NOTICE_SHARE))


class LauncherError(AgentError):
    """The interpreter cannot run node calls (missing, too old, not Python)."""


NOTICE_S = 120.0
"""How long before its job's end stops it a call that set no limit is told, by default."""
NOTICE_SHARE = 4
"""A notice not set is at most a job's length divided by this: a one- or two-minute job's
calls are told in time too, and still run most of it."""
NOTICE_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGINT")
"""What a notice may be: the runner catches SIGUSR1 and SIGUSR2 for a node that does not
(their default ends a process); SIGINT is Python's KeyboardInterrupt."""
NOTICE_CAUGHT = ("SIGUSR1", "SIGUSR2")
"""The notices the runner catches for a node (restated in ``runner/node.py``, which
imports nothing of the agent)."""


class Signal(StrEnum):
    """How a call's process is reached: its whole tree killed, asked to end (SIGTERM,
    killed after a grace), or its own process given its notice signal. The fork server
    takes these words as they are."""

    KILL = "kill"
    TERM = "term"
    NOTICE = "notice"


class EndedBy(StrEnum):
    """Why the launcher stopped a call, when it did (its outcome says so)."""

    CANCEL = "cancel"
    """Cancelled (the engine's word, or its run's)."""
    INTERRUPTED = "interrupted"
    """Its worker was told to stop."""
    TIMEOUT = "timeout"
    """Silent past its ``timeout``."""
    LIMIT = "limit"
    """Past its ``limit``."""
    MEMORY = "memory"
    """Over its memory bound."""


@dataclass(frozen=True)
class Notice:
    """How a launcher's calls are told their end is near: ``signal``, given ``seconds``
    before the job's end to a call that runs until it (its node set no limit); a worker
    told to stop gives it to every call at once."""

    seconds: float | None = None
    """None: a call is told only when its worker is told to stop."""
    signal: str = "SIGUSR1"


def resolve_interpreter(python: str) -> tuple[str, tuple[int, int]]:
    """The real executable behind ``python`` (a shim or a name on PATH) and its version."""
    probe = "import sys; print(sys.executable); print(sys.version_info[0], sys.version_info[1])"
    try:
        done = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LauncherError(f"cannot run the interpreter {python}: {exc}") from exc
    lines = done.stdout.split("\n")
    if done.returncode != 0 or len(lines) < 2:
        raise LauncherError(f"{python} is not a working Python interpreter")
    major, minor = (int(part) for part in lines[1].split())
    if (major, minor) < (3, 9):
        raise LauncherError(f"{python} is Python {major}.{minor}; node calls need 3.9 or later")
    return lines[0], (major, minor)


class BoundedOutput:
    """Keeps the first and last halves of ``limit`` bytes, counting what falls between."""

    def __init__(self, limit: int) -> None:
        self._half = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0

    def add(self, data: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            excess = len(self._tail) - self._half
            if excess > 0:
                del self._tail[:excess]
                self._dropped += excess

    def text(self) -> str:
        middle = f"\n[... {self._dropped} bytes of output dropped ...]\n" if self._dropped else ""
        return (
            bytes(self._head).decode(errors="replace")
            + middle
            + bytes(self._tail).decode(errors="replace")
        )


class RunningCall:
    """One running call: its pipes, what it reported, and why it ended."""

    def __init__(
        self, spec: RunFrame, on_event: EventCallback | None, clock: Clock, notice: Notice
    ) -> None:
        self.spec = spec
        self.notice_s = notice.seconds if spec.until_job_end else None
        """It gets its notice signal this long before its ``limit`` (at once if its limit
        is shorter); None: only when its worker is told to stop."""
        self.notice_signal = notice.signal
        self.clock = clock
        """The launcher's: when the call was last heard from, for its silence timeout."""
        self.on_event = on_event
        self.pid: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        """Set when spawned (not forked): then this process reaps it."""
        self.output = BoundedOutput(LOG_LIMIT_BYTES)
        self.live = LiveOutput(self._lines) if on_event is not None else None
        """Its output as lines, handed to ``on_event`` as ``log`` records while it runs."""
        self.pending = bytearray()
        self.result: dict[str, Any] | None = None
        self.failure: dict[str, str] | None = None
        self.last_activity = clock.monotonic()
        self.ended_by: EndedBy | None = None
        """Why the launcher stopped it, when it did."""
        self.memory_peak = 0
        """The most its processes were seen holding together, in bytes (when bounded)."""
        self.ram_bound_mb = 0
        """What it was held to, in MB: its ``ram_mb``, or its worker's memory (0: none)."""
        loop = asyncio.get_running_loop()
        self.output_fd = -1
        self.output_done: asyncio.Future[None] = loop.create_future()
        self.records_done: asyncio.Future[None] = loop.create_future()
        self.result_arrived: asyncio.Future[None] = loop.create_future()
        self.exit_status: asyncio.Future[int] = loop.create_future()

    def take_output(self, data: bytes) -> None:
        self.output.add(data)
        if self.live is not None:
            self.live.add(data)

    def end_output(self) -> None:
        """Its answer is in: the lines not yet handed on go now, before it."""
        if self.live is not None:
            self.live.close()

    def _lines(self, first: int, lines: list[str]) -> None:
        assert self.on_event is not None
        self.on_event(LogFrame(call_id=self.spec.call_id, first=first, lines=lines))

    def take_records(self, data: bytes) -> None:
        self.last_activity = self.clock.monotonic()
        self.pending += data
        if len(self.pending) > RECORD_LIMIT_BYTES:
            self.failure = error_record(
                ErrorKind.RESULT_TOO_LARGE, f"a record exceeded {RECORD_LIMIT_BYTES} bytes"
            )
            self.pending.clear()
            return
        while (newline := self.pending.find(b"\n")) >= 0:
            line = bytes(self.pending[:newline])
            del self.pending[: newline + 1]
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") == "result":
                self.result = record
                if not self.result_arrived.done():
                    self.result_arrived.set_result(None)
            elif self.on_event is not None:
                self.on_event(
                    ProgressFrame(
                        call_id=self.spec.call_id,
                        event=record.get("event", "emit"),
                        outputs=record.get("outputs"),
                        ts=record.get("ts"),
                    )
                )
