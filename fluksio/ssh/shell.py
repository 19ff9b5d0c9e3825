"""The remote shell a provisioner runs its commands through: one small interface.

:class:`RemoteShell` is the shape of :meth:`fluksio.ssh.AsyncsshTransport.run`;
a provisioner takes one at construction, so its life cycle can be tested with scripted
replies (exit codes, an ``sbatch`` error, a ``squeue`` table, a timeout) and run for real
over SSH with the same code. Nothing here knows SSH.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from fluksio.errors import FluksioError

Transport = Literal["asyncssh", "openssh"]
"""The SSH implementations ``provisioners.json`` may choose between."""

__all__ = [
    "Completed",
    "Forwarding",
    "RemoteProcess",
    "RemoteShell",
    "Route",
    "SharedLogin",
    "Transport",
    "TransportError",
]


class TransportError(FluksioError):
    """The login node could not be reached or would not run the command; says why.

    ``may_have_run`` is true when the command was sent and its answer lost (a timeout, a
    connection dropped mid-command): it may have acted, e.g. ``sbatch`` queued a job.
    ``login_needed`` is true when nothing can run until a person logs in (a one-time
    code); the command was not sent.
    """

    def __init__(
        self, detail: str, *, may_have_run: bool = False, login_needed: bool = False
    ) -> None:
        super().__init__(detail)
        self.may_have_run = may_have_run
        self.login_needed = login_needed


@dataclass(frozen=True)
class Completed:
    """What one command did on the login node."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def error_text(self) -> str:
        """The command's own complaint (its last stderr lines), for users to read."""
        lines = [line.strip() for line in self.stderr.strip().splitlines() if line.strip()]
        text = "; ".join(lines[-3:]) or self.stdout.strip()[:200]
        return text or f"{self.argv[0]} exited with status {self.exit_status}"


@dataclass(frozen=True)
class Route:
    """How a transport reaches the login node, as ``provisioners check --ssh`` shows it."""

    transport: Transport
    config: str | None
    """The OpenSSH config file read, if any."""
    entries: tuple[str, ...]
    """The ``Host`` entries of that file that apply: ``"Host hpc (line 1)"``."""
    destination: str
    """``user@host:port`` as the config resolves ``login``."""
    jump: str | None
    """The ``ProxyJump`` host(s), if any."""
    shared: str | None = None
    """OpenSSH: the shared connection's socket, and whether a master holds it."""

    def lines(self) -> list[str]:
        said = [f"transport: {self.transport}"]
        said.append(f"config: {self.config or 'none'}")
        said.append(f"config entry: {', '.join(self.entries) or 'none matches'}")
        said.append(f"connects to: {self.destination}")
        said.append(f"jump host: {self.jump or 'none'}")
        if self.shared is not None:
            said.append(f"shared connection: {self.shared}")
        return said


class RemoteShell(Protocol):
    """Runs commands on a login node; what a provisioner needs of SSH."""

    async def run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` there with ``stdin`` fed to it.

        A command that ran and failed is a :class:`Completed` with its exit status; only a
        login node that cannot be reached, or a command that does not answer in time,
        raises :class:`TransportError`. With ``once`` the command is never sent a second
        time after it may have started (``sbatch``); without, a command whose connection
        dropped may be run again on a new one (``squeue``).
        """
        ...

    async def close(self) -> None:
        """Release the connection, if one is held open."""
        ...

    async def describe(self) -> Route:
        """How the login node is reached: transport, config entry, jump host."""
        ...


@runtime_checkable
class SharedLogin(Protocol):
    """A shell whose commands can share one login a person opened (one-time codes): the
    system ``ssh`` with a shared master connection. A shell without it needs none."""

    async def login_needed(self) -> bool:
        """Whether commands wait for a person to log in; asks nothing of the login node."""
        ...

    async def logged_in(self) -> bool:
        """Whether a shared login is open; asks nothing of the login node."""
        ...

    async def logout(self) -> bool:
        """Close a shared login, whoever opened it; False when there was none."""
        ...

    def login_argv(self) -> list[str] | None:
        """The command a person runs in a terminal to log in once for every later command;
        None when this one cannot share a login (no place for its connection)."""
        ...


class RemoteProcess(Protocol):
    """A long-lived command on the login node, its input and output open while it runs."""

    async def readline(self) -> bytes:
        """Its next line of output; ``b""`` once it ended."""
        ...

    async def write(self, data: bytes) -> None:
        """Feed its input; a process that ended takes it silently."""
        ...

    async def stop(self) -> str:
        """End its input, wait (briefly) for it to end, kill it otherwise; what it said on
        its standard error."""
        ...


@runtime_checkable
class Forwarding(Protocol):
    """A shell that also forwards a port of the login node's loopback to the engine's side
    and runs long-lived commands: what the login route needs (both transports)."""

    async def forward_remote(self, host: str, port: int) -> int:
        """Forward a new port on the login node's loopback (its number is chosen there and
        returned) to ``host:port`` as the engine's machine reaches it."""
        ...

    async def cancel_forward(self, remote_port: int, host: str, port: int) -> None:
        """Stop forwarding ``remote_port``; nothing if the connection is already gone."""
        ...

    async def start(self, argv: Sequence[str], stdin: bytes) -> RemoteProcess:
        """Start ``argv`` there, ``stdin`` fed to it first; it runs until stopped or until
        the connection goes."""
        ...
