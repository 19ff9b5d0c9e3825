"""Commands on a login node over SSH: the one module that knows SSH.

Two implementations of :class:`~fluksio.provisioners.shell.RemoteShell`, chosen per
provisioner (``"transport"`` in ``provisioners.json``; :func:`open_transport`):

- :class:`SSHTransport` (``asyncssh``, the default): one connection opened on first use
  and kept, so a poll costs one channel, not a login (~50 ms per command against ~200 ms
  for a new OpenSSH process).
- :class:`OpenSSHTransport` (``openssh``): the system ``ssh`` client, so whatever the
  user's OpenSSH does (certificates, GSSAPI, ``Match`` blocks) works unchanged. It always
  runs in batch mode and shares one master connection per provisioner
  (``ControlMaster``) through a socket in a 0700 directory the engine owns. A login node
  that wants a one-time code is logged in to once, by a person, with ``fluksio
  provisioners login`` (:meth:`OpenSSHTransport.login_argv`); the engine then runs its
  commands through that connection and never prompts. Once it is gone, commands fail
  with ``login_needed`` set and nothing is sent to the login node until a new one is up
  (a site that counts failed logins is not hammered).

Both read the user's OpenSSH config (``ssh_config``, default ``~/.ssh/config``): ``login``
may be a ``Host`` alias, and its ``User``, ``Port``, ``IdentityFile`` and ``ProxyJump``
apply. Keys in the ssh-agent (``SSH_AUTH_SOCK``) are offered. ``ssh_key`` and
``known_hosts``, when given, override the config. Host keys are always checked; with
``trust_on_first_use`` a host not known yet is accepted once and recorded, and a host
whose key *changed* is refused either way.

A dropped connection is reopened once per command, unless the command must run at most
once (``sbatch``). Commands travel as argv, quoted for the remote shell here and nowhere
else; anything secret travels on stdin, never in argv (``ps`` shows argv to every user).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import hashlib
import math
import os
import re
import shlex
import signal
import tempfile
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, TypedDict, Unpack

import asyncssh
from asyncssh.config import SSHClientConfig

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.provisioners.shell import Completed, Route, Transport, TransportError

__all__ = [
    "TRANSPORTS",
    "OpenSSHTransport",
    "SSHTransport",
    "open_transport",
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


class _TrustOnFirstUse(asyncssh.SSHClient):
    """Accepts a host key its known_hosts file has no entry for, and records it there."""

    def __init__(self, known_hosts: Path) -> None:
        self._known_hosts = known_hosts

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        # Only reached when the key is not trusted; a host with *some* entry changed its key.
        if self._known_hosts.exists():
            known = asyncssh.read_known_hosts(str(self._known_hosts))
            trusted = known.match(host, addr, port)[0]
            if trusted:
                return False
        name = host if port == 22 else f"[{host}]:{port}"
        line = f"{name} {key.export_public_key('openssh').decode().strip()}\n"
        self._known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self._known_hosts.open("a") as file:
            file.write(line)
        return True


class Options(TypedDict, total=False):
    """The keyword options both transports take."""

    known_hosts: str | None
    trust_on_first_use: bool
    ssh_config: str | None
    command_timeout_s: float
    connect_timeout_s: float
    clock: Clock


class _Transport:
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
        self.on_command: Callable[[str, float, bool], None] | None = None
        """Told of each command: its program, its seconds (connecting included), and
        whether it reached the login node (any exit status) or the transport failed."""

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
        raise NotImplementedError


class SSHTransport(_Transport):
    """asyncssh: runs commands as ``login``; keeps one connection open between them."""

    name: ClassVar[Transport] = "asyncssh"

    def __init__(self, login: str, key: str | None = None, **options: Unpack[Options]) -> None:
        super().__init__(login, key, **options)
        self._known_hosts = self._given_known_hosts or Path("~/.ssh/known_hosts").expanduser()
        self._ssh_config = self._given_ssh_config or Path("~/.ssh/config").expanduser()
        self._connection: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()

    async def _run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` on the login node, ``stdin`` fed to it; raise only if unreachable.

        A command whose session channel the server refused never started and is tried
        once more on a new connection; so is one whose connection dropped, unless
        ``once``: then it may have acted, and the error says so (``may_have_run``).
        """
        command = shlex.join(argv)
        for attempt in (1, 2):
            connection = await self._connect()
            try:
                async with self._clock.timeout(self._command_timeout_s):
                    process = await connection.create_process(command, input=stdin)
                    result = await process.wait(check=False)
                if result.exit_status is None and result.exit_signal is None:
                    # The channel closed with no exit status: the connection went mid-command.
                    raise asyncssh.ConnectionLost("closed before the command exited")
            # TimeoutError first: it is an OSError. A command that ran and did not answer
            # may have acted (sbatch may have queued a job), so it is never run again.
            except TimeoutError:
                await self._drop(connection)
                raise TransportError(
                    f"{self.login}: {argv[0]} did not answer within {self._command_timeout_s:g} s;"
                    " it was not run again",
                    may_have_run=True,
                ) from None
            except asyncssh.ChannelOpenError as exc:
                await self._drop(connection)
                if attempt == 2:
                    raise TransportError(f"{self.login}: no session ({exc.reason})") from None
            except (asyncssh.ConnectionLost, OSError) as exc:
                await self._drop(connection)
                reason = str(exc) or type(exc).__name__
                if once:
                    raise TransportError(
                        f"{self.login}: connection lost while {argv[0]} ran ({reason});"
                        " it was not run again",
                        may_have_run=True,
                    ) from None
                if attempt == 2:
                    raise TransportError(f"{self.login}: connection lost ({reason})") from None
            else:
                return Completed(
                    argv=tuple(argv),
                    # -1 for a command killed by a signal, as asyncssh reports it.
                    exit_status=result.exit_status if result.exit_status is not None else -1,
                    stdout=_text(result.stdout),
                    stderr=_text(result.stderr),
                )
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._connection is not None:
            await self._drop(self._connection)

    async def _drop(self, connection: asyncssh.SSHClientConnection) -> None:
        if self._connection is connection:
            self._connection = None
        connection.close()
        await connection.wait_closed()

    def _unverified_key_message(self) -> str:
        """Why the host key was refused: unknown (add it), or changed (check it)."""
        known, port = self._known_hosts, self._port or 22
        if known.exists() and asyncssh.read_known_hosts(str(known)).match(self._host, "", port)[0]:
            return _changed_key_message(self.login, known, self._host, port)
        return _unknown_key_message(self.login, str(known))

    async def login_needed(self) -> bool:
        return False  # it logs in by itself, or fails with a reason

    async def logged_in(self) -> bool:
        return False  # no login is shared

    async def logout(self) -> bool:
        return False  # nothing outlives the engine's own connection

    def login_argv(self) -> list[str] | None:
        return None  # one process's connection: nothing another process could share

    async def describe(self) -> Route:
        config = self._ssh_config if self._ssh_config.is_file() else None
        resolved = SSHClientConfig.load(
            None,
            [str(config)] if config else [],
            False,
            False,
            False,
            getpass.getuser(),
            self._user or (),
            self._host,
            self._port or (),
        )
        host = resolved.get("Hostname") or self._host
        user = resolved.get("User") or getpass.getuser()
        port = resolved.get("Port") or 22
        return Route(
            transport=self.name,
            config=str(config) if config else None,
            entries=_matching_hosts(config, self._host) if config else (),
            destination=f"{user}@{host}:{port}",
            jump=str(resolved.get("ProxyJump") or "") or None,
        )

    async def _connect(self) -> asyncssh.SSHClientConnection:
        async with self._connecting:
            if self._connection is not None and self._connection.is_closed():
                self._connection = None  # dropped while idle: noticed before any command
            if self._connection is not None:
                return self._connection
            options = self._options()
            try:
                self._connection = await asyncssh.connect(self._host, self._port or (), **options)
            except asyncssh.HostKeyNotVerifiable:
                raise TransportError(self._unverified_key_message()) from None
            except TimeoutError:
                raise TransportError(
                    f"cannot reach {self.login}: no SSH handshake within"
                    f" {self._connect_timeout_s:g} s (is it an SSH server, and up?)"
                ) from None
            except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
                raise TransportError(
                    f"{self.login}: ssh_key {self._key} cannot be read as a private key"
                    f" without a passphrase ({exc})"
                ) from None
            except asyncssh.PermissionDenied:
                which = f"the key {self._key}" if self._key else "every key offered"
                raise TransportError(f"{self.login}: the login node refused {which}") from None
            except (OSError, asyncssh.Error) as exc:
                reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
                raise TransportError(f"cannot reach {self.login}: {reason}") from None
            return self._connection

    def _options(self) -> dict[str, Any]:
        """asyncssh's options: the user's OpenSSH config (``Host`` aliases, ``User``,
        ``Port``, ``IdentityFile``, ``ProxyJump``, ``UserKnownHostsFile``) and ssh-agent
        (``SSH_AUTH_SOCK``), with what ``provisioners.json`` names explicitly on top."""
        if self._given_ssh_config is not None and not self._ssh_config.is_file():
            raise TransportError(f"{self.login}: ssh_config {self._ssh_config} does not exist")
        if self._key is not None and not self._key.is_file():
            raise TransportError(f"{self.login}: ssh_key {self._key} does not exist")
        options: dict[str, Any] = {
            "config": [str(self._ssh_config)] if self._ssh_config.is_file() else [],
            "connect_timeout": self._connect_timeout_s,
            "keepalive_interval": 30,
        }
        if self._user:
            options["username"] = self._user
        if self._key is not None:
            options["client_keys"] = [str(self._key)]
        known = self._known_hosts
        if self._trust_on_first_use:
            options["known_hosts"] = str(known) if known.exists() else ([], [], [])
            options["client_factory"] = lambda: _TrustOnFirstUse(known)
        elif self._given_known_hosts is not None:
            if not known.is_file():
                raise TransportError(
                    f"{self.login}: known_hosts file {known} does not exist (name one with"
                    " known_hosts, or set trust_on_first_use)"
                )
            options["known_hosts"] = str(known)
        # Else the config's UserKnownHostsFile, or ~/.ssh/known_hosts: checked either way.
        return options


# What ssh (exit 255) prints when it never reached the point of running the command.
_NEVER_RAN = re.compile(
    r"Could not resolve hostname|Connection refused|No route to host|Network is unreachable"
    r"|connect to host .* Connection timed out|Connection timed out during banner exchange"
    r"|kex_exchange_identification|Connection closed by .* port \d+$",
    re.MULTILINE,
)
_REFUSED = re.compile(r"Permission denied \(([^)]*)\)")
_INTERACTIVE = frozenset({"keyboard-interactive", "password"})


class OpenSSHTransport(_Transport):
    """The system ``ssh``: batch mode always, one shared master connection per login.

    ``control_path`` is the master's socket, in a directory the engine owns (created
    0700); without one, every command is its own login. A master the engine opened itself
    (``ssh -M -N -f``, batch mode) is closed by :meth:`close`; one a person opened with
    :meth:`login_argv` is left open for the next engine.
    """

    name: ClassVar[Transport] = "openssh"

    def __init__(
        self,
        login: str,
        key: str | None = None,
        *,
        control_path: Path | None = None,
        ssh: str = "ssh",
        **options: Unpack[Options],
    ) -> None:
        super().__init__(login, key, **options)
        self._known_hosts = self._given_known_hosts  # else ssh's own: the config's, or ~/.ssh
        self._ssh_config = self._given_ssh_config
        self._wanted_control_path = control_path
        self._ssh = ssh
        self._own_master = False
        self._key_checked = False
        self._login_refused: str | None = None
        """Why a batch login was refused where a person could log in: wait for one."""
        self._mastering = asyncio.Lock()

    # -- the RemoteShell interface ------------------------------------------------------

    async def _run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` there, through the shared connection when there is one."""
        command = shlex.join(argv)
        for attempt in (1, 2):
            await self._ensure_master()
            status, stdout, stderr = await self._ssh_command(
                ["-o", "ControlMaster=no", "-T", "--", self._host, command],
                stdin=stdin,
                what=argv[0],
            )
            if status != 255:
                return Completed(tuple(argv), status, stdout, stderr)
            if _NEVER_RAN.search(stderr) or _REFUSED.search(stderr) or "verification" in stderr:
                raise self._refusal(stderr)
            reason = _last_line(stderr) or "ssh exited with status 255"
            if once:
                raise TransportError(
                    f"{self.login}: connection lost while {argv[0]} ran ({reason});"
                    " it was not run again",
                    may_have_run=True,
                )
            if attempt == 2:
                raise TransportError(f"{self.login}: connection lost ({reason})")
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the master this engine opened (a person's login stays for the next)."""
        if self._own_master:
            self._own_master = False
            await self._ssh_command(["-O", "exit", "--", self._host], what="ssh -O exit")

    async def logged_in(self) -> bool:
        """Whether a shared connection is open (asks only the local socket)."""
        return self._wanted_control_path is not None and await self._master_running()

    async def logout(self) -> bool:
        """Close the shared connection, whoever opened it; False if none was open."""
        if self._wanted_control_path is None or not await self._master_running():
            return False
        self._own_master = False
        await self._ssh_command(["-O", "exit", "--", self._host], what="ssh -O exit")
        return True

    async def login_needed(self) -> bool:
        """True while a person must log in first; looks at the local socket only."""
        if self._login_refused is None:
            return False
        if await self._master_running():
            self._login_refused = None
            return False
        return True

    def login_argv(self) -> list[str] | None:
        """The ``ssh`` a person runs in a terminal to open the shared connection.

        Prompts as the login node asks (a one-time code), then goes to the background
        and holds the connection until it drops or is closed (``ssh -O exit``).
        """
        if self._wanted_control_path is None:
            return None
        return [
            *self._base_argv(),
            "-o",
            "BatchMode=no",
            "-M",
            "-N",
            "-f",
            "--",
            self._host,
        ]

    async def describe(self) -> Route:
        status, out, said = await self._ssh_command(
            ["-G", "-v", "--", self._host], what="ssh -G", batch=False
        )
        said = said.replace("\r", "")
        if status != 0:
            raise TransportError(f"{self.login}: ssh -G failed: {_last_line(said)}")
        resolved: dict[str, str] = {}
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            resolved.setdefault(key, value)
        entries = tuple(
            f"Host {m.group(3)} ({Path(m.group(1)).name} line {m.group(2)})"
            for m in re.finditer(r"debug1: (\S+) line (\d+): Applying options for (.+)", said)
        )
        configs = re.findall(r"debug1: Reading configuration data (\S+)", said)
        shared = None
        if self._wanted_control_path is not None:
            running = "open" if await self._master_running() else "none open"
            shared = f"{self._control_path()} ({running})"
        jump = resolved.get("proxyjump")
        return Route(
            transport=self.name,
            config=", ".join(configs) or None,
            entries=entries,
            destination=f"{resolved['user']}@{resolved['hostname']}:{resolved['port']}",
            jump=jump if jump and jump != "none" else None,
            shared=shared,
        )

    # -- the shared connection ----------------------------------------------------------

    async def _ensure_master(self) -> None:
        """A master holds the socket, or is started now in batch mode (a key login)."""
        if self._wanted_control_path is None:
            return
        async with self._mastering:
            if await self._master_running():
                self._login_refused = None
                return
            if self._login_refused is not None:
                raise TransportError(
                    f"{self.login}: no shared connection is open ({self._login_refused})",
                    login_needed=True,
                )
            await self._check_key()
            status, _out, stderr = await self._ssh_command(
                [
                    # -M alone: with ControlMaster=yes as well it would mean "ask".
                    "-o",
                    f"ControlPersist={ENGINE_MASTER_PERSIST_S}",
                    "-M",
                    "-N",
                    "-f",
                    "--",
                    self._host,
                ],
                what="ssh -M",
            )
            if status != 0:
                raise self._refusal(stderr)
            self._own_master = True

    async def _check_key(self) -> None:
        """An ``ssh_key`` that is no key is said so, not a refusal (ssh would go on to
        other keys, and the node refuse them): once, by ``ssh-keygen``, locally."""
        if self._key is None or self._key_checked:
            return
        if not self._key.is_file():
            raise TransportError(f"{self.login}: ssh_key {self._key} does not exist")
        process = await asyncio.create_subprocess_exec(
            "ssh-keygen", "-y", "-P", "", "-f", str(self._key),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _out, err = await process.communicate()
        if process.returncode != 0:
            if "are too open" in _text(err):  # OpenSSH refuses a key others may read
                mode = self._key.stat().st_mode & 0o777
                raise TransportError(
                    f"{self.login}: ssh_key {self._key} may be read by others (mode"
                    f" {mode:04o}); OpenSSH refuses such a key: chmod 600 {self._key}"
                )
            said = _last_line(_text(err)).removeprefix(f'Load key "{self._key}": ')
            raise TransportError(
                f"{self.login}: ssh_key {self._key} cannot be read as a private key"
                f" without a passphrase ({said or 'ssh-keygen refused it'})"
            )
        self._key_checked = True

    async def _master_running(self) -> bool:
        status, _out, _err = await self._ssh_command(
            ["-O", "check", "--", self._host], what="ssh -O check"
        )
        return status == 0

    def _control_path(self) -> Path:
        """The master's socket; a path too long for a socket moves to a short one under
        the temporary directory, named by a digest of the long one (both 0700)."""
        wanted = self._wanted_control_path
        assert wanted is not None
        path = wanted
        if len(str(wanted)) > _MAX_SOCKET_PATH:
            digest = hashlib.sha256(str(wanted).encode()).hexdigest()[:20]
            path = Path(tempfile.gettempdir()) / f"fluksio-ssh-{os.getuid()}" / digest
        _private_directory(path.parent)
        return path

    # -- running ssh ----------------------------------------------------------------------

    def _base_argv(self) -> list[str]:
        argv = [self._ssh]
        if self._ssh_config is not None:
            argv += ["-F", str(self._ssh_config)]
        if self._user:
            argv += ["-l", self._user]
        if self._port:
            argv += ["-p", str(self._port)]
        if self._key is not None:
            argv += ["-i", str(self._key), "-o", "IdentitiesOnly=yes"]
        if self._known_hosts is not None:
            argv += ["-o", _option("UserKnownHostsFile", str(self._known_hosts))]
        checking = "accept-new" if self._trust_on_first_use else "yes"
        argv += [
            "-o",
            f"StrictHostKeyChecking={checking}",
            "-o",
            f"ConnectTimeout={math.ceil(self._connect_timeout_s)}",  # whole seconds only
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=4",
        ]
        control = "none"
        if self._wanted_control_path is not None:
            # '%' would be expanded by ssh: a literal one is written '%%'.
            control = str(self._control_path()).replace("%", "%%")
        argv += ["-o", _option("ControlPath", control)]
        return argv

    async def _ssh_command(
        self, args: list[str], *, stdin: str | None = None, what: str, batch: bool = True
    ) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of ``ssh <options> <args>``; a timeout raises."""
        argv = self._base_argv() + (["-o", "BatchMode=yes"] if batch else []) + args
        if self._config_missing():
            raise TransportError(f"{self.login}: ssh_config {self._ssh_config} does not exist")
        if self._key is not None and not self._key.is_file():
            raise TransportError(f"{self.login}: ssh_key {self._key} does not exist")
        # Output goes to unlinked files, not pipes: ssh hands its descriptors to the master,
        # which holds them until the remote command ends, so a pipe could not be waited
        # out after a timeout.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.PIPE
                    if stdin is not None
                    else asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,  # a terminal's Ctrl-C is the engine's to handle
                )
            except OSError as exc:
                raise TransportError(
                    f"{self.login}: cannot run {self._ssh}: {exc.strerror}"
                ) from None
            try:
                async with self._clock.timeout(self._command_timeout_s):
                    await process.communicate(stdin.encode() if stdin is not None else None)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGKILL)
                await process.wait()
                raise TransportError(
                    f"{self.login}: {what} did not answer within {self._command_timeout_s:g} s;"
                    " it was not run again",
                    may_have_run=True,
                ) from None
            assert process.returncode is not None
            out.seek(0)
            err.seek(0)
            return process.returncode, _text(out.read()), _text(err.read())

    def _config_missing(self) -> bool:
        return self._ssh_config is not None and not self._ssh_config.is_file()

    def _refusal(self, stderr: str) -> TransportError:
        """ssh's complaint before anything ran, in the same sentences as asyncssh's."""
        refused = _REFUSED.search(stderr)
        if refused is None:
            return TransportError(self._unreachable(stderr))
        methods = {m.strip() for m in refused.group(1).split(",")}
        if methods & _INTERACTIVE and self._wanted_control_path is not None:
            self._login_refused = f"the login node wants {', '.join(sorted(methods))}"
            return TransportError(
                f"{self.login}: a login without a person was refused ({refused.group(0)})",
                login_needed=True,
            )
        which = f"the key {self._key}" if self._key else "every key offered"
        return TransportError(f"{self.login}: the login node refused {which}")

    def _unreachable(self, stderr: str) -> str:
        port = self._port or 22
        if "HOST IDENTIFICATION HAS CHANGED" in stderr:
            known = self._known_hosts or "known_hosts"
            return _changed_key_message(self.login, known, self._host, port)
        if "Host key verification failed" in stderr:
            return _unknown_key_message(self.login, str(self._known_hosts or "~/.ssh/known_hosts"))
        if "banner exchange" in stderr:
            return (
                f"cannot reach {self.login}: no SSH handshake within"
                f" {self._connect_timeout_s:g} s (is it an SSH server, and up?)"
            )
        return f"cannot reach {self.login}: {_last_line(stderr) or 'ssh failed'}"


def _program(argv: Sequence[str]) -> str:
    """What a command is, for timing: ``sh -c SCRIPT NAME ...`` is its script's ``NAME``
    (``fluksio-submit``), anything else its program."""
    if len(argv) > 3 and argv[0] in ("sh", "bash") and argv[1] == "-c":
        return argv[3]
    return argv[0]


def open_transport(
    kind: Transport,
    login: str,
    key: str | None = None,
    *,
    known_hosts: str | None = None,
    trust_on_first_use: bool = False,
    ssh_config: str | None = None,
    control_path: Path | None = None,
) -> SSHTransport | OpenSSHTransport:
    """The transport ``kind`` names; ``control_path`` is where OpenSSH shares its login."""
    if kind == "openssh":
        return OpenSSHTransport(
            login,
            key,
            known_hosts=known_hosts,
            trust_on_first_use=trust_on_first_use,
            ssh_config=ssh_config,
            control_path=control_path,
        )
    return SSHTransport(
        login,
        key,
        known_hosts=known_hosts,
        trust_on_first_use=trust_on_first_use,
        ssh_config=ssh_config,
    )


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
