"""The launcher's side of the runner's fork server: one SOCK_SEQPACKET socket and its process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from fluksio.agent import runner
from fluksio.agent.calls import LauncherError, Signal
from fluksio.agent.onefile import runner_path
from fluksio.agent.realtime import realtime_within

__all__ = ["ForkServer"]


class ForkServer:
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
        hello = await realtime_within(10, self._ready)
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

    def signal(self, pid: int, op: Signal, signum: int = 0) -> None:
        """Ask the server to ``kill`` a call's tree, to send it SIGTERM (``term``), or to
        send its process ``signum`` (``notice``)."""
        if self._sock is not None and self.alive:
            with contextlib.suppress(OSError):
                self._sock.send(json.dumps({"op": op, "pid": pid, "signal": signum}).encode())

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
                await realtime_within(5, self._process.wait())
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
            self._process = None
