"""What both SSH transports share: their options, the retry policy and the sentences."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import ClassVar, TypedDict

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.ssh.shell import Completed, Transport, TransportError

__all__ = [
    "COMMAND_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "TRANSPORTS",
    "BaseTransport",
    "CommandTimer",
    "ConnectionGone",
    "NeverStarted",
    "Options",
    "parse_login",
]

CONNECT_TIMEOUT_S = 15.0
"""A login node that has not finished the SSH handshake by then (no banner, say) is down."""
# slurmctld being down makes squeue/sbatch retry for about 9 s before they fail: stay above.
COMMAND_TIMEOUT_S = 60.0
# A master the engine opened itself goes this long after its last command (an engine that
# was SIGKILLed leaves nothing behind for longer); polls keep a live engine's open.
ENGINE_MASTER_PERSIST_S = 600
# sun_path holds 108 bytes, and ssh adds a 17-character suffix while it creates the socket.
_MAX_SOCKET_PATH = 90

TRANSPORTS: tuple[Transport, ...] = ("asyncssh", "openssh")


def parse_login(login: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (``host`` may be a ``Host`` alias of the user's SSH config)
    as (user, host, port); what it leaves out is None, for the config to say."""
    user, at, rest = login.rpartition("@")
    host, _, port = rest.partition(":")
    return (user if at else None), host, (int(port) if port else None)


def _matching_hosts(config: Path, alias: str) -> tuple[str, ...]:
    """The ``Host`` lines of ``config`` whose patterns take ``alias`` (``!`` negates)."""
    found = []
    with contextlib.suppress(OSError):
        for number, line in enumerate(config.read_text().splitlines(), start=1):
            words = line.split("#", 1)[0].split()
            if len(words) < 2 or words[0].lower() != "host":
                continue
            patterns = [p for w in words[1:] for p in w.split(",") if p]
            negated = any(fnmatchcase(alias, p[1:]) for p in patterns if p.startswith("!"))
            if not negated and any(fnmatchcase(alias, p) for p in patterns if p[0] != "!"):
                found.append(f"Host {' '.join(words[1:])} (line {number})")
    return tuple(found)


class NeverStarted(Exception):
    """The command never started (the server refused its session): it may be tried again."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ConnectionGone(Exception):
    """The connection went while the command was sent: it may have run."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


CommandTimer = Callable[[str, float, bool], None]
"""Told of each command a shell ran: its program, its seconds (connecting included), and
whether it reached the login node (any exit status) or the transport failed."""


class Options(TypedDict, total=False):
    """The keyword options both transports take."""

    known_hosts: str | None
    trust_on_first_use: bool
    ssh_config: str | None
    command_timeout_s: float
    connect_timeout_s: float
    clock: Clock
    on_command: CommandTimer | None


class BaseTransport:
    """What both transports take, the same fields of ``provisioners.json`` for both."""

    name: ClassVar[Transport]

    def __init__(
        self,
        login: str,
        key: str | None = None,
        *,
        known_hosts: str | None = None,
        trust_on_first_use: bool = False,
        ssh_config: str | None = None,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        clock: Clock = SYSTEM_CLOCK,
        on_command: CommandTimer | None = None,
    ) -> None:
        self.login = login
        self._clock = clock
        self._user, self._host, self._port = parse_login(login)
        self._key = Path(key).expanduser() if key else None
        self._given_known_hosts = Path(known_hosts).expanduser() if known_hosts else None
        self._given_ssh_config = Path(ssh_config).expanduser() if ssh_config else None
        self._trust_on_first_use = trust_on_first_use
        self._command_timeout_s = command_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self.on_command = on_command

    async def run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` on the login node (see each transport's ``_run``), timed."""
        started = self._clock.monotonic()
        reached = False
        try:
            completed = await self._run(argv, stdin, once=once)
            reached = True
            return completed
        finally:
            if self.on_command is not None:
                self.on_command(_program(argv), self._clock.monotonic() - started, reached)

    async def _run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` on the login node, ``stdin`` fed to it; raise only if unreachable.

        A command that never started (the server refused its session) is tried once more
        on a new connection; so is one whose connection dropped, unless ``once``: then it
        may have acted (``sbatch`` may have queued a job), and the error says so
        (``may_have_run``). This policy and its sentences are the same for both transports.
        """
        for attempt in (1, 2):
            try:
                return await self._attempt(argv, stdin)
            except NeverStarted as never:
                if attempt == 2:
                    raise TransportError(f"{self.login}: no session ({never.reason})") from None
            except ConnectionGone as gone:
                if once:
                    raise TransportError(
                        f"{self.login}: connection lost while {argv[0]} ran ({gone.reason});"
                        " it was not run again",
                        may_have_run=True,
                    ) from None
                if attempt == 2:
                    raise TransportError(f"{self.login}: connection lost ({gone.reason})") from None
        raise AssertionError("unreachable")

    async def _attempt(self, argv: Sequence[str], stdin: str | None) -> Completed:
        """Run ``argv`` once: its answer, or :class:`NeverStarted`, :class:`ConnectionGone`
        or a :class:`TransportError` that ends the command's tries."""
        raise NotImplementedError

    # -- the sentences both transports say ------------------------------------------------

    def _no_answer(self, what: str) -> TransportError:
        # A command that ran and did not answer may have acted: it is never run again.
        return TransportError(
            f"{self.login}: {what} did not answer within {self._command_timeout_s:g} s;"
            " it was not run again",
            may_have_run=True,
        )

    def _no_handshake(self) -> str:
        return (
            f"cannot reach {self.login}: no SSH handshake within"
            f" {self._connect_timeout_s:g} s (is it an SSH server, and up?)"
        )

    def _key_refused(self) -> TransportError:
        which = f"the key {self._key}" if self._key else "every key offered"
        return TransportError(f"{self.login}: the login node refused {which}")

    def _key_unreadable(self, said: str) -> TransportError:
        return TransportError(
            f"{self.login}: ssh_key {self._key} cannot be read as a private key"
            f" without a passphrase ({said})"
        )


def _program(argv: Sequence[str]) -> str:
    """What a command is, for timing: ``sh -c SCRIPT NAME ...`` is its script's ``NAME``
    (``fluksio-submit``), anything else its program."""
    if len(argv) > 3 and argv[0] in ("sh", "bash") and argv[1] == "-c":
        return argv[3]
    return argv[0]


def _private_directory(path: Path) -> None:
    """``path`` exists as a directory of ours that nobody else may enter."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
        raise TransportError(f"{path} is not a directory this user owns; remove it")
    if info.st_mode & 0o077:
        path.chmod(0o700)


def _option(name: str, value: str) -> str:
    """``-o Name=value`` as ssh parses it: a value with spaces is quoted."""
    return f'{name}="{value}"' if any(c.isspace() for c in value) else f"{name}={value}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _changed_key_message(login: str, known: Path | str, host: str, port: int) -> str:
    name = host if port == 22 else f"[{host}]:{port}"
    return (
        f"{login}: the host key CHANGED since it was recorded in {known}: the login node was"
        " reinstalled, or someone is in the middle. Ask its admins for its key fingerprint,"
        f" compare (ssh-keyscan -p {port} {host} | ssh-keygen -lf -), then replace the line"
        f" for {name}"
    )


def _unknown_key_message(login: str, known: str) -> str:
    return (
        f"{login}: the host key is not in {known} (add it with ssh-keyscan, or set"
        " trust_on_first_use)"
    )


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else ""
