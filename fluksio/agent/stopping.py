"""How a running call is stopped and how its end is told: the timers a launcher arms for
it (its silence timeout, its limit, its memory bound) and the outcome it is given."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

from fluksio.agent import runner
from fluksio.agent.calls import NOTICE_CAUGHT, RunningCall
from fluksio.agent.clock import Clock, Timer
from fluksio.agent.outcome import CallOutcome, ErrorKind, error_record, limit_error, memory_error

__all__ = ["MEMORY_EVERY_S", "Watchdog", "outcome_of", "watch"]

MB = 1 << 20
MEMORY_EVERY_S = 0.1
"""How often a call with a memory bound has its processes' memory read: a tenth of a
second, as dask's worker does; a node allocating 1 GB a second is stopped within about
100 MB of its bound."""


class Watchdog:
    """Stops a call's timers (each re-armed one by the handle now current)."""

    def __init__(self, handles: list[Timer]) -> None:
        self._handles = handles

    def cancel(self) -> None:
        for handle in self._handles:
            handle.cancel()


def watch(
    call: RunningCall,
    clock: Clock,
    *,
    place_ram_mb: int | None,
    stop: Callable[[RunningCall], None],
    end: Callable[[RunningCall], None],
    ended: Callable[[RunningCall], bool],
    notify: Callable[[RunningCall], object],
) -> Watchdog | None:
    """Arm the call's silence timeout, its limit (with its notice before, if it has one)
    and its memory bound, those it has, on ``clock``: ``stop`` kills its tree at once,
    ``end`` asks it to end and kills it after a grace, ``notify`` gives it its notice
    signal, ``ended`` says whether its process is gone. Its memory bound is its own
    ``ram_mb``, else ``place_ram_mb`` (what its worker has)."""
    timeout = call.spec.timeout
    handles: list[Timer] = []

    def check_silence(slot: int) -> None:
        quiet = clock.monotonic() - call.last_activity
        if quiet >= timeout:
            call.ended_by = call.ended_by or "timeout"
            stop(call)
            return
        handles[slot] = clock.call_later(timeout - quiet, lambda: check_silence(slot))

    def reach_limit() -> None:
        call.ended_by = call.ended_by or "limit"
        end(call)

    def check_memory(slot: int, most: int) -> None:
        held = runner.tree_memory(call.pid, since, within=most) if call.pid is not None else None
        if held is None or ended(call):
            return
        call.memory_peak = max(call.memory_peak, held)
        if held > most:
            call.ended_by = call.ended_by or "memory"
            stop(call)  # at once: a grace would let it grow further
            return
        handles[slot] = clock.call_later(MEMORY_EVERY_S, lambda: check_memory(slot, most))

    if timeout > 0:
        slot = len(handles)
        handles.append(clock.call_later(timeout, lambda: check_silence(slot)))
    limit = call.spec.limit
    if limit is not None:
        handles.append(clock.call_later(limit, reach_limit))
        handles += _notice(call, limit, clock, notify)
    bound_mb = call.spec.ram_mb or place_ram_mb
    # A call in a container: its runtime bounds it; the process here is only the runtime's.
    if bound_mb and call.spec.container is None:
        call.ram_bound_mb = bound_mb
        most, slot = bound_mb * MB, len(handles)
        since = clock.now() - 1.0  # what it leaves in /dev/shm from its start on is its own
        # First read a tenth of a second in: a call over by then costs no read at all.
        handles.append(clock.call_later(MEMORY_EVERY_S, lambda: check_memory(slot, most)))
    return Watchdog(handles) if handles else None


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
        return CallOutcome(
            bool(call.result.get("ok")),
            result=call.result.get("result"),
            error=call.result.get("error"),
            logs=logs,
            pid=call.pid,
            exit_status=status,
            checkpoint=call.result.get("checkpoint"),
        )
    return CallOutcome(
        False,
        error=error_record(ErrorKind.REMOTE_ERROR, _death(status)),
        logs=logs,
        pid=call.pid,
        exit_status=status,
    )


def _notice(
    call: RunningCall, limit: float, clock: Clock, notify: Callable[[RunningCall], object]
) -> list[Timer]:
    """A call that runs until its job's end is given its notice ``notice_s`` before its
    ``limit`` (at once when its limit is shorter)."""
    if call.notice_s is None:
        return []

    def give_notice() -> None:
        notify(call)

    return [clock.call_later(max(0.0, limit - call.notice_s), give_notice)]


def _stopped_error(call: RunningCall) -> dict[str, str] | None:
    """The error of a call the launcher stopped (cancelled, silent, at its limit, over its
    memory); None for one that ended by itself."""
    if call.ended_by == "cancel":
        return error_record(ErrorKind.NODE_CANCELLED, "the call was cancelled")
    if call.ended_by == "timeout":
        return error_record(
            ErrorKind.NODE_TIMEOUT,
            f"the node reported nothing (no result, event or log line) for"
            f" {call.spec.timeout:g} s, its silence timeout, and was stopped",
        )
    if call.ended_by == "limit" and call.spec.limit is not None:
        return limit_error(call.spec.limit)
    if call.ended_by == "memory":
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
