"""The ways a call's process is started and signalled, one class each, chosen once per
call by the launcher: forked from the fork server, spawned as a fresh interpreter, or run
in a container by the worker's runtime.

Each says how the call's process starts (and whether its spec is still to be written to
it), how its tree is signalled, whether it is gone, and how its outcome reads; the
launcher asks it and never branches on the way again.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from fluksio.agent import runner
from fluksio.agent.calls import RunningCall, Signal
from fluksio.agent.containers.base import ContainerError
from fluksio.agent.containers.calls import ContainerCalls
from fluksio.agent.fork_client import ForkServer
from fluksio.agent.onefile import runner_path
from fluksio.agent.protocol.frames import RunFrame
from fluksio.agent.protocol.outcome import CallOutcome

__all__ = ["Contained", "Forked", "Spawned", "Starter"]

_Started = TypeVar("_Started")


class Starter(Protocol):
    """One way to start a call's process and reach it after."""

    async def start(self, call: RunningCall, spec: bytes, out_w: int, rec_w: int) -> int | None:
        """Start the call's process, its output on ``out_w`` and its records on ``rec_w``
        (setting ``call.pid``); the pipe its ``spec`` is still to be written to, or None
        when it was handed over already."""
        ...

    def signal(self, call: RunningCall, how: Signal, signum: int) -> None:
        """``kill`` or ``term`` the call's whole tree, or give its process ``signum``
        (``notice``)."""
        ...

    def gone(self, call: RunningCall) -> bool:
        """Whether the call's process is gone (its pid may be another's by now)."""
        ...

    def outcome(self, call: RunningCall, outcome: CallOutcome) -> CallOutcome:
        """How the call ended, as this way reads it."""
        ...

    def ended(self, call: RunningCall) -> None:
        """The call is over: what was held for it goes."""
        ...


async def _through_pipe(start: Callable[[int], Awaitable[_Started]]) -> tuple[_Started, int]:
    """Start something that reads its spec from a new pipe (``start`` is given the read
    end): what it gave, and the write end, still to be written."""
    spec_r, spec_w = os.pipe()
    try:
        started = await start(spec_r)
    except BaseException:
        os.close(spec_w)
        raise
    finally:
        os.close(spec_r)
    return started, spec_w


def _signal_own(call: RunningCall, how: Signal, signum: int) -> None:
    """Reach a call whose process is this one's child (spawned, or a container runtime's):
    ours until reaped, so its pid is never another's while we signal it."""
    assert call.pid is not None
    if how is Signal.KILL:
        runner.kill_call(call.pid)
    elif how is Signal.NOTICE:
        os.kill(call.pid, signum)
    else:
        runner.signal_tree(call.pid, signal.SIGTERM)


def _own_gone(call: RunningCall) -> bool:
    return call.process is not None and call.process.returncode is not None


class Spawned:
    """A fresh interpreter per call, running the runner: ours until reaped, so its pid
    is never another's while we signal it."""

    def __init__(self, python: str, environ: dict[str, str]) -> None:
        self._python = python
        self._environ = environ

    async def start(self, call: RunningCall, spec: bytes, out_w: int, rec_w: int) -> int | None:
        def spawn(spec_r: int) -> Awaitable[asyncio.subprocess.Process]:
            return asyncio.create_subprocess_exec(
                self._python, str(runner_path()), "call", str(os.getpid()), str(rec_w),
                stdin=spec_r, stdout=out_w, stderr=out_w, pass_fds=(rec_w,),
                env=self._environ, start_new_session=True,
            )  # fmt: skip

        process, spec_w = await _through_pipe(spawn)
        call.pid, call.process = process.pid, process
        return spec_w

    def signal(self, call: RunningCall, how: Signal, signum: int) -> None:
        _signal_own(call, how, signum)

    def gone(self, call: RunningCall) -> bool:
        return _own_gone(call)

    def outcome(self, call: RunningCall, outcome: CallOutcome) -> CallOutcome:
        return outcome

    def ended(self, call: RunningCall) -> None:
        pass


class Forked:
    """Forked from the fork server, which signals the calls it forked and tells their
    exit (the launcher's ``on_exit``): a call's pid is registered here until then."""

    def __init__(self, server: ForkServer, by_pid: dict[int, RunningCall]) -> None:
        self.server = server
        self._by_pid = by_pid

    async def start(self, call: RunningCall, spec: bytes, out_w: int, rec_w: int) -> int | None:
        if self.server.fits_inline(spec):
            call.pid = await self.server.fork(spec, [out_w, rec_w])
            self._by_pid[call.pid] = call
            return None
        pid, spec_w = await _through_pipe(
            lambda spec_r: self.server.fork(None, [spec_r, out_w, rec_w])
        )
        call.pid = pid
        self._by_pid[pid] = call
        return spec_w

    def signal(self, call: RunningCall, how: Signal, signum: int) -> None:
        assert call.pid is not None
        if call.pid in self._by_pid:
            self.server.signal(call.pid, how, signum)

    def gone(self, call: RunningCall) -> bool:
        return call.exit_status.done()

    def outcome(self, call: RunningCall, outcome: CallOutcome) -> CallOutcome:
        return outcome

    def ended(self, call: RunningCall) -> None:
        pass


class Contained:
    """In a container, by the worker's runtime (:mod:`fluksio.agent.containers`): the
    process here is only the runtime's, so the container is signalled through it where
    the runtime cannot be reached by signalling that process."""

    def __init__(self, containers: ContainerCalls | None) -> None:
        self._containers = containers

    def env(self, spec: RunFrame) -> dict[str, str]:
        """What a call in a container is told beside its own environment."""
        return {} if self._containers is None else self._containers.env(spec)

    def _calls(self) -> ContainerCalls:
        if self._containers is None:
            raise ContainerError("this worker runs no containers (start it with --containers)")
        return self._containers

    async def start(self, call: RunningCall, spec: bytes, out_w: int, rec_w: int) -> int | None:
        containers = self._calls()
        process, spec_w = await _through_pipe(
            lambda spec_r: containers.start(call.spec, spec_r, out_w, rec_w)
        )
        call.pid, call.process = process.pid, process
        return spec_w

    def signal(self, call: RunningCall, how: Signal, signum: int) -> None:
        containers = self._calls()
        if not containers.runtime.kills_by_process:
            containers.signal(call.spec.call_id, how, signum)
            return
        if how is Signal.KILL:
            containers.ended(call.spec.call_id)
        _signal_own(call, how, signum)  # its runtime runs the container under this process

    def gone(self, call: RunningCall) -> bool:
        return _own_gone(call)

    def outcome(self, call: RunningCall, outcome: CallOutcome) -> CallOutcome:
        stopped = call.ended_by is not None
        return self._calls().outcome(call.spec, outcome, stopped=stopped)

    def ended(self, call: RunningCall) -> None:
        if self._containers is not None:
            self._containers.ended(call.spec.call_id)
