"""How a running call is stopped and how its end is told: the watchdog a launcher arms for
it (its silence timeout, its limit, its memory bound) and the outcome it is given."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from fluksio.agent import runner
from fluksio.agent.calls import NOTICE_CAUGHT, EndedBy, RunningCall
from fluksio.agent.clock import Clock, Timer
from fluksio.agent.protocol.codec import decoded
from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.agent.protocol.outcome import (
    CallOutcome,
    ErrorKind,
    error_record,
    limit_error,
    memory_error,
)

__all__ = ["MEMORY_EVERY_S", "Watchdog", "outcome_of"]

MB = 1 << 20
MEMORY_EVERY_S = 0.1
"""How often a call with a memory bound has its processes' memory read: a tenth of a
second, as dask's worker does; a node allocating 1 GB a second is stopped within about
100 MB of its bound."""
LOOK_EVERY = 3
"""Every this many readings, the call's open files are looked through for what it holds
in /dev/shm (a third of a second): a file written and closed faster is not seen."""


class Watchdog:
    """One call's timers: its silence timeout, its limit (with its notice before, if it
    has one) and its memory bound, those it has, on the launcher's clock.

    ``stop`` kills the call's tree at once, ``end`` asks it to end and kills it after a
    grace, ``notify`` gives it its notice signal, ``ended`` says whether its process is
    gone. Its memory bound is its own ``ram_mb``, else ``place_ram_mb`` (what its worker
    has); a call in a container is bounded by its runtime instead."""

    def __init__(
        self,
        call: RunningCall,
        clock: Clock,
        *,
        place_ram_mb: int | None,
        stop: Callable[[RunningCall], None],
        end: Callable[[RunningCall], None],
        ended: Callable[[RunningCall], bool],
        notify: Callable[[RunningCall], object],
    ) -> None:
        self._call = call
        self._clock = clock
        self._stop, self._end, self._ended, self._notify = stop, end, ended, notify
        self._silence: Timer | None = None
        self._limit: Timer | None = None
        self._notice: Timer | None = None
        self._memory: Timer | None = None
        self._most = 0
        """The memory bound, in bytes (0: none)."""
        self._reads = 0
        self._shm_seen: dict[tuple[int, int], str] = {}
        """The files in /dev/shm its processes were seen holding open (they count while
        they are there, open or left)."""
        spec = call.spec
        if spec.timeout > 0:
            self._silence = clock.call_later(spec.timeout, self._check_silence)
        if spec.limit is not None:
            self._limit = clock.call_later(spec.limit, self._reach_limit)
            if call.notice_s is not None:
                lead = max(0.0, spec.limit - call.notice_s)
                self._notice = clock.call_later(lead, self._give_notice)
        bound_mb = spec.ram_mb or place_ram_mb
        if bound_mb and spec.container is None:
            call.ram_bound_mb = bound_mb
            self._most = bound_mb * MB
            # First read a tenth of a second in: a call over by then costs no read at all.
            self._memory = clock.call_later(MEMORY_EVERY_S, self._check_memory)

    def cancel(self) -> None:
        for timer in (self._silence, self._limit, self._notice, self._memory):
            if timer is not None:
                timer.cancel()

    def _check_silence(self) -> None:
        call, timeout = self._call, self._call.spec.timeout
        quiet = self._clock.monotonic() - call.last_activity
        if quiet >= timeout:
            call.ended_by = call.ended_by or EndedBy.TIMEOUT
            self._stop(call)
            return
        self._silence = self._clock.call_later(timeout - quiet, self._check_silence)

    def _give_notice(self) -> None:
        self._notify(self._call)

    def _reach_limit(self) -> None:
        self._call.ended_by = self._call.ended_by or EndedBy.LIMIT
        self._end(self._call)

    def _check_memory(self) -> None:
        call = self._call
        held = None
        if call.pid is not None:
            self._reads += 1
            look = self._reads % LOOK_EVERY == 1  # the first reading looks too
            held = runner.tree_memory(call.pid, self._most, shm_seen=self._shm_seen, look=look)
        if held is None or self._ended(call):
            return
        call.memory_peak = max(call.memory_peak, held)
        if held > self._most:
            call.ended_by = call.ended_by or EndedBy.MEMORY
            self._stop(call)  # at once: a grace would let it grow further
            return
        self._memory = self._clock.call_later(MEMORY_EVERY_S, self._check_memory)


def outcome_of(call: RunningCall) -> CallOutcome:
    """How a call ended, from what it reported and why the launcher stopped it, if it did."""
    status = call.exit_status.result() if call.exit_status.done() else None
    logs = call.output.text()
    stopped = _stopped_error(call)
    if stopped is not None:
        return CallOutcome(False, error=stopped, logs=logs, pid=call.pid, exit_status=status)
    if call.failure is not None:
        return CallOutcome(False, error=call.failure, logs=logs, pid=call.pid, exit_status=status)
    if call.result is not None:
        try:
            saved = _saved_state(call.result.get("checkpoint"))
        except ValueError as exc:
            error = error_record(ErrorKind.REMOTE_ERROR, f"its saved state is unreadable: {exc}")
            return CallOutcome(False, error=error, logs=logs, pid=call.pid, exit_status=status)
        return CallOutcome(
            bool(call.result.get("ok")),
            result=call.result.get("result"),
            error=call.result.get("error"),
            logs=logs,
            pid=call.pid,
            exit_status=status,
            checkpoint=saved,
        )
    return CallOutcome(
        False,
        error=error_record(ErrorKind.REMOTE_ERROR, _death(status)),
        logs=logs,
        pid=call.pid,
        exit_status=status,
    )


def _saved_state(reported: object) -> ArtifactRef | None:
    """The state the call saved with ``fluksio.checkpoint``, as its runner reported it."""
    return None if reported is None else decoded(ArtifactRef, reported, "checkpoint")


def _stopped_error(call: RunningCall) -> dict[str, str] | None:
    """The error of a call the launcher stopped (cancelled, silent, at its limit, over its
    memory); None for one that ended by itself."""
    if call.ended_by is EndedBy.CANCEL:
        return error_record(ErrorKind.NODE_CANCELLED, "the call was cancelled")
    if call.ended_by is EndedBy.TIMEOUT:
        return error_record(
            ErrorKind.NODE_TIMEOUT,
            f"the node reported nothing (no result, event or log line) for"
            f" {call.spec.timeout:g} s, its silence timeout, and was stopped",
        )
    if call.ended_by is EndedBy.LIMIT and call.spec.limit is not None:
        return limit_error(call.spec.limit)
    if call.ended_by is EndedBy.MEMORY:
        return memory_error(call.memory_peak, call.ram_bound_mb, own=bool(call.spec.ram_mb))
    return None


def _death(status: int | None) -> str:
    if status is None:
        return "the node's process ended without a result"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        hint = " (out of memory?)" if -status == signal.SIGKILL else ""
        return f"the node's process was killed by {name}{hint} before it reported a result"
    return f"the node's process exited with status {status} without a result"


def ignore_notices_until_caught() -> None:
    """A notice due at once (a call with less time than its lead) may reach a call process
    before its runner catches the signal, and SIGUSR1's default ends a process. Ignored
    here, in the process that starts them, they are ignored in every call process (fork
    server, spares and spawned calls inherit it) until the runner installs its own
    handler, which its node's own children do not inherit. Only the main thread may."""
    if threading.current_thread() is threading.main_thread():
        for name in NOTICE_CAUGHT:
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def stop_env(call: RunningCall, now: float) -> dict[str, str]:
    """What a call starting at ``now`` (a Unix time) is told of its end: which signal its
    notice is (it may come when its worker is told to stop, whatever bounds it) and, for
    a bounded call, when it is stopped (read by ``fluksio.time_left()``)."""
    env = {"FLUKSIO_NOTICE_SIGNAL": call.notice_signal}
    if call.spec.limit is not None:
        env["FLUKSIO_STOP_AT"] = f"{now + call.spec.limit:.3f}"
    return env
