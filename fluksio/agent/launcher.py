"""Starts node calls as processes through the runner and collects what they report.

Shared by the engine (its own calls) and ``fluksio-worker`` (the calls sent to it); it
needs nothing but the standard library and asyncio.

**Fork server or spawn.** A :class:`Launcher` serves one interpreter (resolved to its real
path once, so a pyenv shim's 70-odd milliseconds are paid once, not per call) and one base
environment. On Linux it starts the runner as a fork server and forks each call from it;
it spawns a fresh interpreter per call instead when ``mode="spawn"`` is asked for, when
the platform has no ``fork``, or when the fork server cannot be started or has died more
than :data:`MAX_SERVER_RESTARTS` times. The fork server is safe because it imports only
the standard library, reads no thread-cap or device variable and starts no thread: each
child applies its call's environment before importing the node's code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fluksio.agent import runner
from fluksio.agent.errors import AgentError
from fluksio.agent.onefile import runner_path
from fluksio.agent.outcome import CallOutcome, ErrorKind, error_record, limit_error

__all__ = [
    "CallOutcome",
    "CallSpec",
    "Launcher",
    "LauncherError",
    "error_record",
    "limit_error",
    "resolve_interpreter",
]

MAX_SERVER_RESTARTS = 3
LOG_LIMIT_BYTES = 1 << 20
RECORD_LIMIT_BYTES = 64 << 20
_READ_CHUNK = 1 << 16
_EXIT_GRACE_S = 2.0
LIMIT_GRACE_S = 3.0
"""A call past its ``limit`` is sent SIGTERM, its whole tree; what still runs this many
seconds later is killed."""

EventCallback = Callable[[dict[str, Any]], None]


class _Watchdog:
    """Stops a call's timers (its silence timer, whichever re-armed handle is current)."""

    def __init__(self, handles: list[asyncio.TimerHandle]) -> None:
        self._handles = handles

    def cancel(self) -> None:
        for handle in self._handles:
            handle.cancel()


class LauncherError(AgentError):
    """The interpreter cannot run node calls (missing, too old, not Python)."""


@dataclass(frozen=True)
class CallSpec:
    """One call: what to run and what it may use.

    ``timeout`` is silence seconds: the call is stopped after this long without reporting
    anything. ``limit`` is the longest it may run at all, however much it reports. 0 is
    "none" for both.
    """

    call_id: str
    source: str
    node: str
    flow: str = ""
    op: str = "run"
    kwargs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 0.0
    limit: float = 0.0
    run_id: str = ""


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


class _Bounded:
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


class _Call:
    """One running call: its pipes, what it reported, and why it ended."""

    def __init__(self, spec: CallSpec, on_event: EventCallback | None) -> None:
        self.spec = spec
        self.on_event = on_event
        self.pid: int | None = None
        self.process: asyncio.subprocess.Process | None = None
        """Set when spawned (not forked): then this process reaps it."""
        self.output = _Bounded(LOG_LIMIT_BYTES)
        self.pending = bytearray()
        self.result: dict[str, Any] | None = None
        self.failure: dict[str, str] | None = None
        self.last_activity = time.monotonic()
        self.ended_by: str | None = None  # "cancel", "timeout" or "limit" when we stopped it
        loop = asyncio.get_running_loop()
        self.output_fd = -1
        self.output_done: asyncio.Future[None] = loop.create_future()
        self.records_done: asyncio.Future[None] = loop.create_future()
        self.result_arrived: asyncio.Future[None] = loop.create_future()
        self.exit_status: asyncio.Future[int] = loop.create_future()

    def take_records(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
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
                self.on_event(record)


class Launcher:
    """Runs calls for one interpreter and base environment; see the module docstring."""

    def __init__(
        self,
        python: str | None = None,
        *,
        mode: str = "auto",
        environ: dict[str, str] | None = None,
    ) -> None:
        if mode not in {"auto", "fork", "spawn"}:
            raise ValueError(f"mode must be auto, fork or spawn, not {mode!r}")
        self._python_asked = python or sys.executable
        self._requested_mode = mode
        self._base_env = runner.filtered_environ(dict(os.environ if environ is None else environ))
        self._base_env["PYTHONUNBUFFERED"] = "1"
        self.python = ""
        self.version: tuple[int, int] = (0, 0)
        self.mode = "spawn"
        self._calls: dict[str, _Call] = {}
        self._by_pid: dict[int, _Call] = {}
        self._server: _ForkServer | None = None
        self._server_restarts = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.python, self.version = await loop.run_in_executor(
            None, resolve_interpreter, self._python_asked
        )
        if self._requested_mode != "spawn" and hasattr(os, "fork"):
            await self._start_server()
        if self._requested_mode == "fork" and self.mode != "fork":
            raise LauncherError(f"the fork server for {self.python} could not be started")

    async def _start_server(self) -> None:
        server = _ForkServer(self.python, self._base_env, self._on_exit)
        try:
            await server.start()
        except (TimeoutError, OSError, LauncherError):
            self.mode = "spawn"
            return
        self._server = server
        self.mode = "fork"

    async def close(self) -> None:
        for call in list(self._calls.values()):
            self.cancel(call.spec.call_id)
        if self._server is not None:
            await self._server.close()
            self._server = None

    def running(self) -> list[str]:
        return list(self._calls)

    def pid_of(self, call_id: str) -> int | None:
        call = self._calls.get(call_id)
        return None if call is None else call.pid

    def cancel(self, call_id: str, *, reason: str = "cancel") -> bool:
        """Kill the call's process group; its outcome says it was cancelled."""
        call = self._calls.get(call_id)
        if call is None:
            return False
        call.ended_by = call.ended_by or reason
        self._kill(call)
        return True

    @staticmethod
    def _ended(call: _Call) -> bool:
        """Whether the call's process is gone, so that its pid may already be another's."""
        if call.process is not None:
            return call.process.returncode is not None
        return call.exit_status.done()

    def _kill(self, call: _Call) -> None:
        """Kill the call's process and everything it started."""
        self._signal(call, "kill")

    def _terminate(self, call: _Call) -> None:
        """SIGTERM the call's whole tree; kill what still runs after :data:`LIMIT_GRACE_S`."""
        if self._signal(call, "term"):
            asyncio.get_running_loop().call_later(LIMIT_GRACE_S, self._kill, call)

    def _signal(self, call: _Call, op: str) -> bool:
        """``kill`` or ``term`` the call's tree, through the fork server that forked it or
        here (a spawned call is ours until reaped, so its pid is never another's)."""
        if call.pid is None or self._ended(call):
            return False
        if self._server is not None and call.pid in self._by_pid and self.mode == "fork":
            self._server.signal(call.pid, op)
        elif op == "kill":
            runner.kill_call(call.pid)
        else:
            runner.signal_tree(call.pid, signal.SIGTERM)
        return True

    def _on_exit(self, pid: int, status: int) -> None:
        call = self._by_pid.pop(pid, None)
        if call is not None and not call.exit_status.done():
            call.exit_status.set_result(status)

    async def run(self, spec: CallSpec, on_event: EventCallback | None = None) -> CallOutcome:
        """Run one call to its end and return how it ended (never raises for the node)."""
        if spec.call_id in self._calls:
            raise ValueError(f"call {spec.call_id!r} is already running")
        call = _Call(spec, on_event)
        self._calls[spec.call_id] = call
        try:
            return await self._run(call)
        finally:
            del self._calls[spec.call_id]

    async def _run(self, call: _Call) -> CallOutcome:
        data = json.dumps(
            {
                "op": call.spec.op,
                "source": call.spec.source,
                "node": call.spec.node,
                "flow": call.spec.flow,
                "kwargs": call.spec.kwargs,
                "env": call.spec.env,
            }
        ).encode()
        out_r, out_w = os.pipe()
        rec_r, rec_w = os.pipe()
        try:
            spec_w, process = await self._start_process(call, data, out_w, rec_w)
        except BaseException:
            os.close(out_r)
            os.close(rec_r)
            raise
        finally:
            os.close(out_w)
            os.close(rec_w)
        if spec_w is not None:
            self._write_spec(spec_w, data)
        call.output_fd = out_r
        self._read(out_r, call.output.add, call.output_done, call)
        self._read(rec_r, call.take_records, call.records_done, call)
        watchdog = self._watch(call)
        try:
            await asyncio.wait(
                (call.result_arrived, call.records_done), return_when=asyncio.FIRST_COMPLETED
            )
            if call.result is None:
                await self._exit_of(call, process)  # ended without a result: say how
        finally:
            if watchdog is not None:
                watchdog.cancel()
        if not call.output_done.done():
            # The child flushed its output before writing the result: it is in the pipe.
            self._drain(out_r, call.output.add)
        outcome = self._outcome(call)
        if not call.records_done.done():
            # It answered; it should exit now. If it lingers (non-daemon threads), end it.
            asyncio.get_running_loop().call_later(_EXIT_GRACE_S, self._end_lingering, call)
        return outcome

    def _end_lingering(self, call: _Call) -> None:
        if not call.records_done.done():
            self._kill(call)

    async def _exit_of(self, call: _Call, process: asyncio.subprocess.Process | None) -> None:
        if process is not None and not call.exit_status.done():
            with contextlib.suppress(asyncio.TimeoutError):
                call.exit_status.set_result(await asyncio.wait_for(process.wait(), _EXIT_GRACE_S))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(call.exit_status), _EXIT_GRACE_S)

    @staticmethod
    def _drain(fd: int, sink: Callable[[bytes], None]) -> None:
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except (BlockingIOError, OSError):
                return
            if not data:
                return
            sink(data)

    async def _start_process(
        self, call: _Call, data: bytes, out_w: int, rec_w: int
    ) -> tuple[int | None, asyncio.subprocess.Process | None]:
        """Start the call's process; returns the spec pipe still to write (if any)."""
        if self.mode == "fork" and self._server is not None and not self._server.alive:
            await self._restart_server()
        if self.mode == "fork" and self._server is not None and self._server.fits_inline(data):
            call.pid = await self._server.fork(data, [out_w, rec_w])
            self._by_pid[call.pid] = call
            return None, None
        spec_r, spec_w = os.pipe()
        try:
            if self.mode == "fork" and self._server is not None:
                call.pid = await self._server.fork(None, [spec_r, out_w, rec_w])
                self._by_pid[call.pid] = call
                return spec_w, None
            process = await asyncio.create_subprocess_exec(
                self.python,
                str(runner_path()),
                "call",
                str(os.getpid()),
                str(rec_w),
                stdin=spec_r,
                stdout=out_w,
                stderr=out_w,
                pass_fds=(rec_w,),
                env=self._base_env,
                start_new_session=True,
            )
        except BaseException:
            os.close(spec_w)
            raise
        finally:
            os.close(spec_r)
        call.pid = process.pid
        call.process = process
        return spec_w, process

    async def _restart_server(self) -> None:
        if self._server is not None:
            await self._server.close()
            self._server = None
        self._server_restarts += 1
        if self._server_restarts > MAX_SERVER_RESTARTS:
            self.mode = "spawn"
            return
        await self._start_server()

    def _write_spec(self, fd: int, data: bytes) -> None:
        os.set_blocking(fd, False)
        loop = asyncio.get_running_loop()
        view = memoryview(data)

        def pump() -> None:
            nonlocal view
            try:
                while view:
                    view = view[os.write(fd, view) :]
            except BlockingIOError:
                return
            except OSError:
                view = view[:0]  # the process is gone; it will report no result
            loop.remove_writer(fd)
            os.close(fd)

        loop.add_writer(fd, pump)
        pump()

    def _read(
        self, fd: int, sink: Callable[[bytes], None], done: asyncio.Future[None], call: _Call
    ) -> None:
        """Feed ``sink`` from ``fd`` until EOF, then close ``fd`` and resolve ``done``."""
        os.set_blocking(fd, False)
        loop = asyncio.get_running_loop()

        def on_readable() -> None:
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                call.last_activity = time.monotonic()
                sink(data)
                return
            loop.remove_reader(fd)
            os.close(fd)
            if not done.done():
                done.set_result(None)

        loop.add_reader(fd, on_readable)

    def _watch(self, call: _Call) -> _Watchdog | None:
        """Arm the call's silence timeout and its limit, those it has."""
        loop = asyncio.get_running_loop()
        timeout = call.spec.timeout
        handles: list[asyncio.TimerHandle] = []

        def check_silence() -> None:
            quiet = time.monotonic() - call.last_activity
            if quiet >= timeout:
                call.ended_by = call.ended_by or "timeout"
                self._kill(call)
                return
            handles[0] = loop.call_later(timeout - quiet, check_silence)

        def reach_limit() -> None:
            call.ended_by = call.ended_by or "limit"
            self._terminate(call)

        if timeout > 0:
            handles.append(loop.call_later(timeout, check_silence))
        if call.spec.limit > 0:
            handles.append(loop.call_later(call.spec.limit, reach_limit))
        return _Watchdog(handles) if handles else None

    def _outcome(self, call: _Call) -> CallOutcome:
        status = call.exit_status.result() if call.exit_status.done() else None
        logs = call.output.text()
        if call.ended_by == "cancel":
            error = error_record(ErrorKind.NODE_CANCELLED, "the call was cancelled")
            return CallOutcome(False, error=error, logs=logs, pid=call.pid, exit_status=status)
        if call.ended_by == "timeout":
            error = error_record(
                ErrorKind.NODE_TIMEOUT,
                f"the node reported nothing (no result, event or log line) for"
                f" {call.spec.timeout:g} s, its silence timeout, and was stopped",
            )
            return CallOutcome(False, error=error, logs=logs, pid=call.pid, exit_status=status)
        if call.ended_by == "limit":
            error = limit_error(call.spec.limit)
            return CallOutcome(False, error=error, logs=logs, pid=call.pid, exit_status=status)
        if call.failure is not None:
            return CallOutcome(
                False, error=call.failure, logs=logs, pid=call.pid, exit_status=status
            )
        if call.result is not None:
            return CallOutcome(
                bool(call.result.get("ok")),
                result=call.result.get("result"),
                error=call.result.get("error"),
                logs=logs,
                pid=call.pid,
                exit_status=status,
            )
        return CallOutcome(
            False,
            error=error_record(ErrorKind.REMOTE_ERROR, _death(status)),
            logs=logs,
            pid=call.pid,
            exit_status=status,
        )


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


class _ForkServer:
    """The client side of ``runner.py serve``: a SOCK_SEQPACKET socket and its process."""

    def __init__(
        self, python: str, environ: dict[str, str], on_exit: Callable[[int, int], None]
    ) -> None:
        self._python = python
        self._environ = environ
        self._on_exit = on_exit
        self._sock: socket.socket | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._forks: dict[int, asyncio.Future[int]] = {}
        self._spares: dict[int, socket.socket] = {}  # pid: the socket its request goes to
        self._room: asyncio.Future[None] | None = None
        """Resolved when the socket, full, can take a request again: one watch on it for
        every sender waiting."""
        self._next_id = 0
        self.alive = False

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = await asyncio.create_subprocess_exec(
                self._python,
                str(runner_path()),
                "serve",
                str(theirs.fileno()),
                str(os.getpid()),
                pass_fds=(theirs.fileno(),),
                env=self._environ,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self._sock = ours
        self._ready = loop.create_future()
        loop.add_reader(ours.fileno(), self._on_message)
        self.alive = True
        hello = await asyncio.wait_for(self._ready, 10)
        if hello.get("protocol") != runner.PROTOCOL:
            await self.close()
            raise LauncherError("the fork server speaks another runner protocol")

    def _on_message(self) -> bool:
        """Handle one message from the server; False if none was waiting."""
        assert self._sock is not None
        try:
            data, fds, _flags, _address = socket.recv_fds(self._sock, 65536, 1)
        except BlockingIOError:
            return False
        except OSError:
            data, fds = b"", []
        if not data:
            for fd in fds:
                os.close(fd)
            self._lost()
            return False
        message = json.loads(data)
        op = message.get("op")
        if op == "spare" and fds:
            self._spares[message["pid"]] = socket.socket(fileno=fds[0])
        elif op == "ready" and self._ready is not None and not self._ready.done():
            self._ready.set_result(message)
        elif op == "forked":
            future = self._forks.pop(message["id"], None)
            if future is not None and not future.done():
                future.set_result(message["pid"])
        elif op == "exit":
            spare = self._spares.pop(message["pid"], None)
            if spare is not None:
                spare.close()  # it was killed before it had a call
            self._on_exit(message["pid"], message["status"])
        return True

    def _lost(self) -> None:
        self.alive = False
        self._stop_waiting_for_room("the fork server went away")
        if self._sock is not None:
            asyncio.get_running_loop().remove_reader(self._sock.fileno())
        for future in self._forks.values():
            if not future.done():
                future.set_exception(OSError("the fork server went away"))
        self._forks.clear()
        self._close_spares()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(OSError("the fork server did not start"))

    @staticmethod
    def fits_inline(spec: bytes) -> bool:
        return len(spec) + 64 <= runner.MAX_MESSAGE_BYTES

    async def fork(self, spec: bytes | None, fds: list[int]) -> int:
        """Start a call: ``spec`` inline with ``fds`` = [output, records], or ``spec`` None
        with ``fds`` = [spec pipe, output, records]. Its pid."""
        assert self._sock is not None
        self._next_id += 1
        request_id = self._next_id
        payload = json.dumps({"op": "fork", "id": request_id}).encode() + b"\n" + (spec or b"")
        # The next spare's offer may be waiting unread behind the last call's result.
        while not self._spares and self.alive and self._on_message():
            pass
        while self._spares:
            pid = next(iter(self._spares))  # the oldest: it has had the most time to get ready
            inbox = self._spares.pop(pid)
            try:
                socket.send_fds(inbox, [payload], fds)
            except OSError:
                continue  # it ended meanwhile (its exit is on the way); the server forks anew
            finally:
                inbox.close()
            await self._send(json.dumps({"op": "took", "pid": pid}).encode(), [])
            return pid
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._forks[request_id] = future
        await self._send(payload, fds)
        return await future

    async def _send(self, payload: bytes, fds: list[int]) -> None:
        assert self._sock is not None
        while True:
            try:
                socket.send_fds(self._sock, [payload], fds)
                return
            except BlockingIOError:
                # The server reads requests as fast as it forks; a burst can fill the
                # socket. Wait until the loop sees room (not a poll: no CPU while full).
                await asyncio.shield(self._writable())

    def _writable(self) -> asyncio.Future[None]:
        if self._room is None:
            assert self._sock is not None
            loop, fd = asyncio.get_running_loop(), self._sock.fileno()
            room: asyncio.Future[None] = loop.create_future()

            def ready() -> None:
                loop.remove_writer(fd)
                self._room = None
                if not room.done():
                    room.set_result(None)

            loop.add_writer(fd, ready)
            self._room = room
        return self._room

    def _stop_waiting_for_room(self, why: str) -> None:
        if self._room is not None and self._sock is not None:
            asyncio.get_running_loop().remove_writer(self._sock.fileno())
            if not self._room.done():
                self._room.set_exception(OSError(why))
        self._room = None

    def _close_spares(self) -> None:
        for inbox in self._spares.values():
            inbox.close()  # the spare reads the end of its socket and exits
        self._spares.clear()

    def signal(self, pid: int, op: str) -> None:
        """Ask the server to ``kill`` a call's tree, or to send it SIGTERM (``term``)."""
        if self._sock is not None and self.alive:
            with contextlib.suppress(OSError):
                self._sock.send(json.dumps({"op": op, "pid": pid}).encode())

    async def close(self) -> None:
        self._close_spares()
        self._stop_waiting_for_room("the launcher closed")
        if self._sock is not None:
            if self.alive:
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self.alive = False
        if self._process is not None:
            try:
                await asyncio.wait_for(self._process.wait(), 5)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
            self._process = None
