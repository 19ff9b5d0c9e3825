"""The way in through the login node, for compute nodes that cannot reach the engine.

With ``"route": "login"`` a provisioner's jobs dial the login node instead of the engine
(``fluksio-worker --connect-to LOGIN:PORT``, TLS still verified against the engine's own
name). :class:`LoginRoute` keeps that path up over the provisioner's own SSH connection:

- the connection forwards a port on the login node's *loopback* to the engine's listener
  (``ssh -R 127.0.0.1:0:...``: a site's ``GatewayPorts no`` is enough);
- a small relay (:mod:`fluksio.ssh.relay_program`, standard-library Python 3.6+) listens
  on the login node's other addresses and passes each connection's bytes to that port. It
  holds at most :data:`MAX_CONNECTIONS` at once and refuses more;
- the engine writes the relay a line every :data:`HEARTBEAT_S`; the relay ends at end of
  input (the engine stopped it, or the SSH connection went) or after
  :data:`RELAY_SILENCE_S` without a line (the engine was killed and nothing closed the
  connection). Nothing of it outlives the engine by more than that.

A path that goes (the connection dropped) is built again at once, then after a doubling
rest up to :data:`MAX_REST_S`; the relay asks for the port it had before (kept in
``port_file``), so the workers of jobs already running reconnect where they were told to.
While the login needs a person (a one-time code) it waits for one, as submissions do.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path

from fluksio.clock import Clock
from fluksio.logs import get_logger
from fluksio.ssh.shell import Forwarding, RemoteProcess, SharedLogin, TransportError

__all__ = [
    "HEARTBEAT_S",
    "MAX_CONNECTIONS",
    "RELAY_MARK",
    "RELAY_SILENCE_S",
    "LoginRoute",
    "RouteDown",
    "relay_argv",
]

log = get_logger(__name__)

HEARTBEAT_S = 5.0
"""How often the engine tells the relay it is still there."""
RELAY_SILENCE_S = 20.0
"""The relay ends this long after the engine's last line: the bound after an engine dies
without its SSH connection being closed (a SIGKILLed engine's is closed by its kernel, and
the relay ends at once)."""
MAX_CONNECTIONS = 256
"""Connections the relay holds at once (workers hold one each, plus one per transfer);
more are refused, and a refused worker tries again as after any disconnect."""
MAX_REST_S = 30.0
"""The longest rest between attempts to build the path again."""
READY_S = 60.0
"""How long a relay may take to say it listens (it waits for the port a dying relay still
holds, up to ``RELAY_SILENCE_S`` plus 5 s)."""
RELAY_MARK = "fluksio-relay"
"""In the relay's command line: how ``provisioners check --ssh`` finds it."""

_PROGRAM = (files("fluksio.ssh") / "relay_program.py").read_bytes()
# Reads the program from standard input, which then carries the engine's lines.
_BOOT = (
    "import sys;sys.version_info<(3,6) and sys.exit('fluksio: the relay needs Python 3.6 or"
    " newer; this python3 is '+sys.version.split()[0]);n=int(sys.argv[1]);"
    "sys.argv=sys.argv[2:];exec(compile(sys.stdin.buffer.read(n),'fluksio-relay','exec'))"
)


def relay_argv(label: str, port: int, upstream: int, listen_on: str | None = None) -> list[str]:
    """The relay's command on the login node (the program itself goes on stdin); it
    listens on ``listen_on`` if given (``127.0.0.1`` for a host's own workers), else on
    every address."""
    return [
        "python3", "-c", _BOOT, str(len(_PROGRAM)), RELAY_MARK, label, str(port),
        str(upstream), str(MAX_CONNECTIONS), f"{RELAY_SILENCE_S:g}",
        *([listen_on] if listen_on else []),
    ]  # fmt: skip


class RouteDown(Exception):
    """The path is not up; ``sentence`` says why, ``login_needed`` if a person must log in."""

    def __init__(self, sentence: str, *, login_needed: bool = False) -> None:
        super().__init__(sentence)
        self.sentence = sentence
        self.login_needed = login_needed


@dataclass(frozen=True)
class _Down:
    why: str
    since: float
    login_needed: bool = False


class LoginRoute:
    """Keeps one path from the login node's ``login_address`` to the engine's listener.

    ``shell`` is the provisioner's SSH (either transport); ``engine`` is where the engine
    listens as its own machine reaches it; ``listen_on`` is the relay's address there
    (default: every address).
    """

    def __init__(
        self,
        shell: Forwarding,
        *,
        label: str,
        login_host: str,
        engine: Callable[[], tuple[str, int] | None],
        clock: Clock,
        port_file: Path | None = None,
        on_change: Callable[[], None] = lambda: None,
        listen_on: str | None = None,
    ) -> None:
        self._shell = shell
        self._listen_on = listen_on
        self._label = label
        self._login_host = login_host
        self._engine = engine
        self._clock = clock
        self._port_file = port_file
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._port: int | None = None
        self._held = 0
        self._down: _Down | None = None
        self._went_up = False
        """Whether the attempt under way got the path up (a drop then rebuilds at once)."""
        self._changed = asyncio.Event()

    @property
    def address(self) -> tuple[str, int] | None:
        """Where compute nodes connect while the path is up."""
        return (self._login_host, self._port) if self._port is not None else None

    def down_sentence(self) -> str | None:
        """Why the path is down, in one sentence; None while it is up or not wanted."""
        if self._task is None or self._down is None:
            return None
        since = f"{datetime.fromtimestamp(self._down.since, UTC):%H:%M:%S} UTC"
        if self._down.login_needed:
            return (
                f"the way in through {self._login_host} waits for a login"
                f" (fluksio provisioners login {self._label}) since {since}"
            )
        return (
            f"the way in through {self._login_host} is down since {since}"
            f" ({self._down.why}); it is being built again"
        )

    def keep(self) -> None:
        """Build the path if it is not being kept already; returns at once."""
        if self._task is None:
            self._down = _Down("not built yet", self._clock.now())
            self._task = asyncio.get_running_loop().create_task(self._keep_up())

    async def ready(self, wait_s: float) -> tuple[str, int]:
        """The path's address, built first if need be, waited for up to ``wait_s``."""
        self.keep()
        with contextlib.suppress(TimeoutError):
            async with self._clock.timeout(wait_s):
                while self.address is None and not (self._down and self._down.login_needed):
                    self._changed.clear()
                    await self._changed.wait()
        address = self.address
        if address is not None:
            return address
        sentence = self.down_sentence() or f"the way in through {self._login_host} is down"
        raise RouteDown(sentence, login_needed=bool(self._down and self._down.login_needed))

    async def stop(self) -> None:
        """Take the path down: the relay ends and the forward is cancelled."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self._on_change()
        self._port = None

    # -- keeping it up --------------------------------------------------------------------

    async def _keep_up(self) -> None:
        rest = 1.0
        while True:
            self._went_up = False
            try:
                await self._wait_for_login()
                await self._run_once()  # returns only by raising: the path went down
            except TransportError as exc:
                self._set_down(exc.detail, login_needed=exc.login_needed)
            except RouteDown as exc:
                self._set_down(exc.sentence)
            if self._went_up:
                rest = 1.0  # it was up: build it again at once, then rest as after failures
                continue
            await self._clock.sleep(rest)
            rest = min(rest * 2, MAX_REST_S)

    async def _wait_for_login(self) -> None:
        shell = self._shell
        if not isinstance(shell, SharedLogin):
            return
        while await shell.login_needed():
            self._set_down("a person must log in", login_needed=True)
            await self._clock.sleep(2.0)

    async def _run_once(self) -> None:
        engine = self._engine()
        if engine is None:
            raise RouteDown("the engine is not listening yet")
        host, port = engine
        upstream = await self._shell.forward_remote(host, port)
        try:
            argv = relay_argv(self._label, self._wanted_port(), upstream, self._listen_on)
            relay = await self._shell.start(argv, _PROGRAM)
            try:
                await self._serve(relay)
            finally:
                said = (await relay.stop()).strip()
            raise RouteDown(said.splitlines()[-1] if said else "the relay ended")
        finally:
            self._port = None
            with contextlib.suppress(TransportError):
                await self._shell.cancel_forward(upstream, host, port)

    async def _serve(self, relay: RemoteProcess) -> None:
        """Until the relay ends: wait for it to listen, then tell it we are here."""
        async with self._clock.timeout(READY_S):
            first = await relay.readline()
        words = first.decode(errors="replace").split()
        if len(words) != 2 or words[0] != "listening" or not words[1].isdigit():
            return
        self._up(int(words[1]))
        reading = asyncio.ensure_future(self._read(relay))
        try:
            while not reading.done():
                await relay.write(b".\n")
                with contextlib.suppress(TimeoutError):
                    async with self._clock.timeout(HEARTBEAT_S):
                        await asyncio.shield(reading)
        finally:
            reading.cancel()

    async def _read(self, relay: RemoteProcess) -> None:
        while line := await relay.readline():
            words = line.split()
            if len(words) == 2 and words[0] == b"holding" and words[1].isdigit():
                self._held = int(words[1])

    def _wanted_port(self) -> int:
        if self._port_file is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(self._port_file.read_text().strip())
        return 0

    def _up(self, port: int) -> None:
        self._port = port
        self._went_up = True
        was_down = self._down
        self._down = None
        if self._port_file is not None:
            with contextlib.suppress(OSError):
                self._port_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._port_file.write_text(f"{port}\n")
        log.info("route.up", provisioner=self._label, login=self._login_host, port=port,
                 after=was_down.why if was_down else None)  # fmt: skip
        self._changed.set()
        self._on_change()

    def _set_down(self, why: str, *, login_needed: bool = False) -> None:
        if self._down is None or self._down.why != why:
            log.warning("route.down", provisioner=self._label, login=self._login_host, why=why)
            self._down = _Down(why, self._clock.now(), login_needed)
            self._on_change()
        self._port = None
        self._changed.set()
