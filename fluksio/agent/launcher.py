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
import collections
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import Callable

from fluksio.agent import runner
from fluksio.agent.calls import (
    EndedBy,
    EventCallback,
    LauncherError,
    Notice,
    RunningCall,
    Signal,
    resolve_interpreter,
)
from fluksio.agent.clock import SYSTEM_CLOCK, Clock
from fluksio.agent.containers.base import ContainerError
from fluksio.agent.containers.calls import ContainerCalls
from fluksio.agent.fork_client import ForkServer
from fluksio.agent.protocol.frames import THREAD_VARIABLES, RunFrame
from fluksio.agent.protocol.outcome import (
    CallOutcome,
    ErrorKind,
    error_record,
    limit_error,
)
from fluksio.agent.realtime import realtime_after, realtime_within
from fluksio.agent.starters import Contained, Forked, Spawned, Starter
from fluksio.agent.stopping import (
    Watchdog,
    ignore_notices_until_caught,
    outcome_of,
    stop_env,
)

__all__ = [
    "CallOutcome",
    "Launcher",
    "LauncherError",
    "error_record",
    "limit_error",
    "resolve_interpreter",
]

MAX_SERVER_RESTARTS = 3
_READ_CHUNK = 1 << 16
_SMALL_READ = 4096
_GATHER_S = 0.005
"""After a small read of a call's output, how long its writes gather before the next."""
_EXIT_GRACE_S = 2.0
_EARLY_CANCELS_KEPT = 1024
"""Cancels of calls not (yet) known, remembered: the newest this many."""
LIMIT_GRACE_S = 3.0
"""A call past its ``limit`` is sent SIGTERM, its whole tree; what still runs this many
seconds later is killed."""


class Launcher:
    """Runs calls for one interpreter and base environment; see the module docstring."""

    def __init__(
        self,
        python: str | None = None,
        *,
        mode: str = "auto",
        environ: dict[str, str] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ram_mb: int | None = None,
        containers: ContainerCalls | None = None,
        notice: Notice | None = None,
    ) -> None:
        """``clock``: what a call's timeout, limit and grace are decided on (the engine's
        or the agent's); pacing and process deadlines stay real (:mod:`.realtime`).
        ``ram_mb``: what the place has, the memory bound of a call that sets none of its
        own (None: such a call is not bounded). ``containers``: how calls that name a
        container run (None: such a call fails, ``ContainerError``). ``notice``: how its
        calls are told their end is near (the worker's ``--notice-s``; None: no notice
        before a job's end)."""
        self.containers = containers
        self.notice = Notice() if notice is None else notice
        if mode not in {"auto", "fork", "spawn"}:
            raise ValueError(f"mode must be auto, fork or spawn, not {mode!r}")
        self._ram_mb = ram_mb
        self._python_asked = python or sys.executable
        self._requested_mode = mode
        self._base_env = runner.filtered_environ(dict(os.environ if environ is None else environ))
        self._base_env["PYTHONUNBUFFERED"] = "1"
        self.python = ""
        self.version: tuple[int, int] = (0, 0)
        self.mode = "spawn"
        self._calls: dict[str, RunningCall] = {}
        self._cancelled_early: collections.OrderedDict[str, None] = collections.OrderedDict()
        """Calls cancelled before their ``run`` began (a cancel that came with the call):
        each ends cancelled as soon as it is run."""
        self._by_pid: dict[int, RunningCall] = {}
        self._forked: Forked | None = None
        """The fork server's way, while it serves."""
        self._spawned = Spawned(self.python, self._base_env)
        self._contained = Contained(containers)
        self._ways: dict[str, Starter] = {}
        """How each running call was started (chosen once, as it starts)."""
        self._server_restarts = 0
        self._clock = clock

    async def start(self) -> None:
        ignore_notices_until_caught()
        loop = asyncio.get_running_loop()
        self.python, self.version = await loop.run_in_executor(
            None, resolve_interpreter, self._python_asked
        )
        self._spawned = Spawned(self.python, self._base_env)
        if self._requested_mode != "spawn" and hasattr(os, "fork"):
            await self._start_server()
        if self._requested_mode == "fork" and self.mode != "fork":
            raise LauncherError(f"the fork server for {self.python} could not be started")

    async def _start_server(self) -> None:
        server = ForkServer(self.python, self._base_env, self._on_exit)
        try:
            await server.start()
        except (TimeoutError, OSError, LauncherError):
            self.mode = "spawn"
            return
        self._forked = Forked(server, self._by_pid)
        self.mode = "fork"

    async def close(self) -> None:
        for call in list(self._calls.values()):
            self.cancel(call.spec.call_id)
        if self._forked is not None:
            await self._forked.server.close()
            self._forked = None

    def running(self) -> list[str]:
        return list(self._calls)

    def pid_of(self, call_id: str) -> int | None:
        call = self._calls.get(call_id)
        return None if call is None else call.pid

    def cancel(self, call_id: str, *, reason: EndedBy = EndedBy.CANCEL) -> bool:
        """Kill the call's process group; its outcome says it was cancelled."""
        call = self._calls.get(call_id)
        if call is None:
            self._cancelled_early[call_id] = None
            while len(self._cancelled_early) > _EARLY_CANCELS_KEPT:
                self._cancelled_early.popitem(last=False)
            return False
        call.ended_by = call.ended_by or reason
        self._kill(call)  # or, while its process is being started, once it has started
        return True

    def _ended(self, call: RunningCall) -> bool:
        """Whether the call's process is gone, so that its pid may already be another's."""
        way = self._ways.get(call.spec.call_id)
        return way is None or way.gone(call)

    def _kill(self, call: RunningCall) -> None:
        """Kill the call's process and everything it started."""
        self._signal(call, Signal.KILL)

    def _terminate(self, call: RunningCall) -> None:
        """SIGTERM the call's whole tree; kill what still runs after :data:`LIMIT_GRACE_S`."""
        if self._signal(call, Signal.TERM):
            self._clock.call_later(LIMIT_GRACE_S, lambda: self._kill(call))

    def notify(self, call_id: str) -> bool:
        """Send a running call its notice signal now (its worker was told to stop)."""
        call = self._calls.get(call_id)
        return call is not None and self._notify(call)

    def _notify(self, call: RunningCall) -> bool:
        return self._signal(call, Signal.NOTICE, getattr(signal, call.notice_signal))

    def _signal(self, call: RunningCall, how: Signal, signum: int = 0) -> bool:
        """Reach the call's process as ``how`` says, the way it was started; False when it
        has none (yet) or is gone."""
        way = self._ways.get(call.spec.call_id)
        if call.pid is None or way is None or way.gone(call):
            return False
        way.signal(call, how, signum)
        return True

    def _on_exit(self, pid: int, status: int) -> None:
        call = self._by_pid.pop(pid, None)
        if call is not None and not call.exit_status.done():
            call.exit_status.set_result(status)

    async def run(self, spec: RunFrame, on_event: EventCallback | None = None) -> CallOutcome:
        """Run one call to its end and return how it ended (never raises for the node)."""
        if spec.call_id in self._calls:
            raise ValueError(f"call {spec.call_id!r} is already running")
        call = RunningCall(spec, on_event, self._clock, self.notice)
        if self._cancelled_early.pop(spec.call_id, 0) is None:
            call.ended_by = EndedBy.CANCEL
            return outcome_of(call)
        self._calls[spec.call_id] = call
        try:
            return await self._run(call)
        finally:
            del self._calls[spec.call_id]
            way = self._ways.pop(spec.call_id, None)
            if way is not None:
                way.ended(call)

    async def _run(self, call: RunningCall) -> CallOutcome:
        spec = call.spec
        threads = {} if spec.threads is None else dict.fromkeys(THREAD_VARIABLES, str(spec.threads))
        data = json.dumps(
            {
                "op": spec.op,
                "source": spec.source,
                "node": spec.node,
                "flow": spec.flow,
                "kwargs": spec.kwargs,
                "env": {
                    **spec.env,
                    **threads,
                    **stop_env(call, self._clock.now()),
                    **({} if spec.container is None else self._contained.env(spec)),
                },
                "restored": None if spec.restored is None else dataclasses.asdict(spec.restored),
            }
        ).encode()
        out_r, out_w = os.pipe()
        rec_r, rec_w = os.pipe()
        refused: ContainerError | None = None
        try:
            spec_w = await self._start_process(call, data, out_w, rec_w)
        except ContainerError as exc:
            refused = exc
        except BaseException:
            os.close(out_r)
            os.close(rec_r)
            raise
        finally:
            os.close(out_w)
            os.close(rec_w)
        if refused is not None:  # its container could not start: what its runtime said
            self._drain(out_r, call.take_output)
            call.end_output()
            os.close(out_r)
            os.close(rec_r)
            call.failure = error_record(ErrorKind.CONTAINER_ERROR, str(refused))
            return outcome_of(call)
        if call.ended_by is not None:
            self._kill(call)  # cancelled while it was being started
        if spec_w is not None:
            self._write_spec(spec_w, data)
        call.output_fd = out_r
        self._read(out_r, call.take_output, call.output_done, call)
        self._read(rec_r, call.take_records, call.records_done, call)
        watchdog = self._watch(call)
        try:
            await asyncio.wait(
                (call.result_arrived, call.records_done), return_when=asyncio.FIRST_COMPLETED
            )
            if call.result is None:
                await self._exit_of(call)  # ended without a result: say how
        finally:
            watchdog.cancel()
        if not call.output_done.done():
            # The child flushed its output before writing the result: it is in the pipe.
            self._drain(out_r, call.take_output)
        call.end_output()
        outcome = self._outcome(call)
        if not call.records_done.done():
            # It answered; it should exit now. If it lingers (non-daemon threads), end it.
            self._clock.call_later(_EXIT_GRACE_S, lambda: self._end_lingering(call))
        return outcome

    def _end_lingering(self, call: RunningCall) -> None:
        if not call.records_done.done():
            self._kill(call)

    async def _exit_of(self, call: RunningCall) -> None:
        process = call.process
        if process is not None and not call.exit_status.done():
            with contextlib.suppress(asyncio.TimeoutError):
                call.exit_status.set_result(await realtime_within(_EXIT_GRACE_S, process.wait()))
        with contextlib.suppress(asyncio.TimeoutError):
            await realtime_within(_EXIT_GRACE_S, asyncio.shield(call.exit_status))

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
        self, call: RunningCall, data: bytes, out_w: int, rec_w: int
    ) -> int | None:
        """Start the call's process the way that suits it; the spec pipe still to write."""
        forks = call.spec.container is None and self.mode == "fork"
        if forks and self._forked is not None and not self._forked.server.alive:
            await self._restart_server()
        way: Starter = (
            self._contained
            if call.spec.container is not None
            else self._forked
            if self.mode == "fork" and self._forked is not None
            else self._spawned
        )
        self._ways[call.spec.call_id] = way
        return await way.start(call, data, out_w, rec_w)

    async def _restart_server(self) -> None:
        if self._forked is not None:
            await self._forked.server.close()
            self._forked = None
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
        self, fd: int, sink: Callable[[bytes], None], done: asyncio.Future[None], call: RunningCall
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
                call.last_activity = self._clock.monotonic()
                sink(data)
                if len(data) < _SMALL_READ:
                    # A node writing line by line would wake this loop once a line: let
                    # its writes gather in the pipe for a moment instead.
                    loop.remove_reader(fd)
                    realtime_after(_GATHER_S, lambda: loop.add_reader(fd, on_readable))
                return
            loop.remove_reader(fd)
            os.close(fd)
            if not done.done():
                done.set_result(None)

        loop.add_reader(fd, on_readable)

    def _watch(self, call: RunningCall) -> Watchdog:
        """Arm the call's silence timeout, its limit and its memory bound, those it has."""
        return Watchdog(
            call,
            self._clock,
            place_ram_mb=self._ram_mb,
            stop=self._kill,
            end=self._terminate,
            ended=self._ended,
            notify=self._notify,
        )

    def _outcome(self, call: RunningCall) -> CallOutcome:
        way = self._ways.get(call.spec.call_id)
        outcome = outcome_of(call)
        return outcome if way is None else way.outcome(call, outcome)
