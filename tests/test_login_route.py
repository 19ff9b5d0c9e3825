"""The login route: the relay as a real process, and the whole path over the real sshd.

The relay runs here as the login node would run it (``python3``, its program on stdin);
the path runs over the local Slurm's sshd with each transport, as ``hpcuser``.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from importlib.resources import files
from pathlib import Path

import pytest

from fluksio.clock import SYSTEM_CLOCK
from fluksio.provisioners.login_route import LoginRoute, RouteDown, relay_argv
from fluksio.provisioners.slurm import SlurmProvisioner, SlurmSettings
from fluksio.ssh.relay_program import FIRST_BYTES_S
from fluksio.ssh.shell import Forwarding
from tests.support.clock import ManualClock
from tests.support.process import parent_of
from tests.support.relay import relay_pids
from tests.support.scripted import listening_at
from tests.support.slurm import LocalSlurm, local_slurm, slurm_provisioner
from tests.support.transports import both_transports, make_transport
from tests.support.wait import poll_async, wait_for

PROGRAM = (files("fluksio.ssh") / "relay_program.py").read_bytes()


def test_the_relay_is_python_3_6() -> None:
    ast.parse(PROGRAM, feature_version=(3, 6))


# -- the relay alone ---------------------------------------------------------------------


class Echo:
    """A TCP server on 127.0.0.1 that sends back what it reads: the engine's stand-in."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]

    async def serve(self) -> asyncio.Server:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        return await asyncio.start_server(echo, sock=self.listener)


@contextlib.asynccontextmanager
async def echo_server() -> AsyncIterator[int]:
    echo = Echo()
    server = await echo.serve()
    try:
        yield echo.port
    finally:
        server.close()


def start_relay(
    upstream: int, *, port: int = 0, max_connections: int = 8, silence_s: float = 20
) -> subprocess.Popen[bytes]:
    argv = relay_argv("test", port, upstream)
    argv[0] = "/usr/bin/python3"  # the system's, as a login node's would be
    argv[-2:] = [str(max_connections), f"{silence_s:g}"]
    relay = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert relay.stdin is not None
    relay.stdin.write(PROGRAM)
    relay.stdin.flush()
    return relay


@contextlib.contextmanager
def relay_process(
    upstream: int, *, max_connections: int = 8, silence_s: float = 20
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    relay = start_relay(upstream, max_connections=max_connections, silence_s=silence_s)
    try:
        assert relay.stdout is not None
        words = relay.stdout.readline().split()
        assert words[0] == b"listening", words
        yield relay, int(words[1])
    finally:
        if relay.poll() is None:
            relay.kill()
        relay.wait(timeout=10)


def holding(relay: subprocess.Popen[bytes]) -> int:
    """How many connections the relay holds, as it answers the engine's line."""
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(b".\n")
    relay.stdin.flush()
    words = relay.stdout.readline().split()
    assert words[0] == b"holding", words
    return int(words[1])


async def round_trip(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    got = await asyncio.wait_for(reader.readexactly(len(data)), 20)
    writer.close()
    return got


async def test_the_relay_carries_bytes_both_ways_and_refuses_past_its_bound() -> None:
    async with echo_server() as upstream:
        with relay_process(upstream, max_connections=2) as (relay, port):
            payload = os.urandom(3 * 1024 * 1024)
            assert await round_trip(port, payload) == payload
            await asyncio.to_thread(
                wait_for, lambda: holding(relay) == 0, timeout=20, what="its slot freed"
            )
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            for reader, writer in held:  # both carried
                writer.write(b"x")
                assert await asyncio.wait_for(reader.readexactly(1), 20) == b"x"
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(reader.read(1), 20) == b""  # the third: refused
            writer.close()
            assert holding(relay) == 2
            for _reader, held_writer in held:
                held_writer.close()
            await asyncio.to_thread(
                wait_for, lambda: holding(relay) == 0, timeout=20, what="their slots freed"
            )
            assert await round_trip(port, b"again") == b"again"


async def test_the_relay_closes_connections_that_never_speak() -> None:
    # Silent connections filled the relay's places for good and cut every worker off.
    async with echo_server() as upstream:
        with relay_process(upstream, max_connections=3) as (relay, port):
            opened = time.monotonic()
            silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
            await asyncio.to_thread(
                wait_for, lambda: holding(relay) == 3, timeout=20, what="its places all held"
            )
            for reader, _writer in silent:
                assert await asyncio.wait_for(reader.read(1), FIRST_BYTES_S + 20) == b""
            assert time.monotonic() - opened >= FIRST_BYTES_S - 1
            await asyncio.to_thread(
                wait_for, lambda: holding(relay) == 0, timeout=20, what="their places freed"
            )
            assert await round_trip(port, b"a worker speaks at once") == b"a worker speaks at once"
            for _reader, writer in silent:
                writer.close()


async def _eventually(attempt: Callable[[], Awaitable[bytes]], timeout: float = 20) -> bytes:
    """``attempt``'s answer once it connects (a relay coming back), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await attempt()
        except (OSError, asyncio.IncompleteReadError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def _closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_the_relay_ends_with_its_input_and_after_silence() -> None:
    async with echo_server() as upstream:
        with relay_process(upstream) as (relay, port):
            assert relay.stdin is not None
            relay.stdin.close()  # the engine's end went
            assert relay.wait(timeout=10) == 0
            assert _closed(port)
        with relay_process(upstream, silence_s=1) as (relay, port):
            started = time.monotonic()
            assert relay.wait(timeout=15) == 0  # nothing written: silence
            assert time.monotonic() - started >= 1
            assert _closed(port)


async def test_a_new_relay_waits_for_the_port_a_dying_one_still_holds() -> None:
    async with echo_server() as upstream:
        with relay_process(upstream, silence_s=3) as (old, port):
            new = start_relay(upstream, port=port, silence_s=3)
            try:
                assert new.stdout is not None and new.stdin is not None
                old.wait(timeout=15)  # silent engine: the old one ends
                new.stdin.write(b".\n")
                new.stdin.flush()
                assert new.stdout.readline().split() == [b"listening", str(port).encode()]
            finally:
                new.kill()
                new.wait(timeout=10)


# -- the whole path over SSH ---------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.mark.contract
@pytest.mark.xdist_group("cluster")
@both_transports
async def test_the_path_carries_connections_comes_back_on_its_port_and_leaves_nothing(
    slurm: LocalSlurm, tmp_path: Path, kind: str
) -> None:
    shell = make_transport(
        kind, slurm.login_with_port, slurm.key, shared=tmp_path / "ssh",
        known_hosts=slurm.known_hosts,
    )  # fmt: skip
    assert isinstance(shell, Forwarding)
    label = f"route-test-{time.time_ns()}"
    async with echo_server() as upstream:
        route = LoginRoute(
            shell,
            label=label,
            login_host="127.0.0.1",
            engine=lambda: ("127.0.0.1", upstream),
            clock=SYSTEM_CLOCK,
            port_file=tmp_path / "route-port",
        )
        try:
            host, port = await route.ready(60)
            assert (host, route.down_sentence()) == ("127.0.0.1", None)
            assert await round_trip(port, b"through the login node") == b"through the login node"
            # The connection drops (its sshd session killed): the path comes back, same port.
            (relay,) = relay_pids(label)
            os.kill(parent_of(relay), 9)
            await asyncio.to_thread(
                wait_for, lambda: relay not in relay_pids(label), timeout=30, what="old relay"
            )
            again = await route.ready(60)
            assert again == (host, port)
            assert await _eventually(lambda: round_trip(port, b"back")) == b"back"
        finally:
            await route.stop()
            await shell.close()
        wait_for(lambda: not relay_pids(label), timeout=10, what="relay gone after stop")
        assert _closed(port)


@pytest.mark.contract
@pytest.mark.xdist_group("cluster")
async def test_a_path_that_cannot_be_built_says_why(slurm: LocalSlurm, tmp_path: Path) -> None:
    shell = make_transport(
        "asyncssh", slurm.login_with_port, str(tmp_path / "no-such-key"),
        shared=tmp_path / "ssh", known_hosts=slurm.known_hosts,
    )  # fmt: skip
    assert isinstance(shell, Forwarding)
    route = LoginRoute(
        shell, label="never", login_host="127.0.0.1", engine=lambda: ("127.0.0.1", 9),
        clock=SYSTEM_CLOCK,
    )  # fmt: skip
    try:
        with pytest.raises(RouteDown) as down:
            await route.ready(5)
        sentence = down.value.sentence
        assert sentence.startswith("the way in through 127.0.0.1 is down since ")
        assert "ssh_key" in sentence and sentence.endswith("; it is being built again")
    finally:
        await route.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


@pytest.mark.contract
@pytest.mark.xdist_group("cluster")
async def test_a_provisioners_route_waits_on_the_engines_clock_and_comes_back_after_a_drop(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    # Before, the route of every provisioner waited on the system's clock, whatever the
    # engine's was: a test could only wait its retries out.
    clock = ManualClock()
    name = f"clocked{os.getpid()}"
    entry = slurm_provisioner(slurm, 9, name=name, route="login", login_address="127.0.0.1")
    hpc = SlurmProvisioner(
        SlurmSettings.model_validate(entry), clock=clock, state_dir=tmp_path / "state"
    )
    async with echo_server() as upstream:
        try:
            await hpc.way_in.keep(jobs_alive=True)  # a job may run: the route is built

            async def waiting_on_the_clock() -> bool:
                return hpc.path_down() is not None and bool(clock.pending())

            await poll_async(waiting_on_the_clock, timeout=30, what="the route to rest")
            assert "the engine is not listening yet" in str(hpc.path_down())
            hpc.start(listening_at(upstream))  # the engine listens now: once the rest is over
            clock.advance(1.0)
            address = await asyncio.wait_for(hpc.way_in.connect_to(), 60)
            assert address is not None
            host, port = address.split(":")
            assert hpc.path_down() is None and host == "127.0.0.1"
            assert await round_trip(int(port), b"through the route") == b"through the route"
            # The connection drops (its sshd session killed): back at once, on its port.
            (relay,) = relay_pids(name)
            os.kill(parent_of(relay), 9)
            await asyncio.to_thread(
                wait_for, lambda: relay not in relay_pids(name), timeout=30, what="old relay"
            )
            again = await asyncio.wait_for(hpc.way_in.connect_to(), 60)
            assert again == f"{host}:{port}"
            assert await _eventually(lambda: round_trip(int(port), b"back")) == b"back"
        finally:
            await hpc.close()
    wait_for(lambda: not relay_pids(name), timeout=10, what="relay gone after close")
