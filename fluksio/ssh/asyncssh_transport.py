"""SSH in the engine's own process (asyncssh): one connection kept open between commands."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Unpack

from fluksio.clock import Clock
from fluksio.ssh.base import (
    BaseTransport,
    ConnectionGone,
    NeverStarted,
    Options,
    _changed_key_message,
    _matching_hosts,
    _text,
    _unknown_key_message,
)
from fluksio.ssh.quiet_asyncssh import SSHClientConfig, asyncssh
from fluksio.ssh.shell import Completed, RemoteProcess, Route, Transport, TransportError

__all__ = ["AsyncsshTransport"]


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


class AsyncsshTransport(BaseTransport):
    """asyncssh: runs commands as ``login``; keeps one connection open between them."""

    name: ClassVar[Transport] = "asyncssh"

    def __init__(self, login: str, key: str | None = None, **options: Unpack[Options]) -> None:
        super().__init__(login, key, **options)
        self._known_hosts = self._given_known_hosts or Path("~/.ssh/known_hosts").expanduser()
        self._ssh_config = self._given_ssh_config or Path("~/.ssh/config").expanduser()
        self._connection: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()
        self._forwards: dict[int, asyncssh.SSHListener] = {}

    async def _attempt(self, argv: Sequence[str], stdin: str | None) -> Completed:
        connection = await self._connect()
        try:
            async with self._clock.timeout(self._command_timeout_s):
                process = await connection.create_process(shlex.join(argv), input=stdin)
                result = await process.wait(check=False)
            if result.exit_status is None and result.exit_signal is None:
                # The channel closed with no exit status: the connection went mid-command.
                raise asyncssh.ConnectionLost("closed before the command exited")
        # TimeoutError first: it is an OSError.
        except TimeoutError:
            await self._drop(connection)
            raise self._no_answer(argv[0]) from None
        except asyncssh.ChannelOpenError as exc:
            await self._drop(connection)
            raise NeverStarted(exc.reason) from None
        except (asyncssh.ConnectionLost, OSError) as exc:
            await self._drop(connection)
            raise ConnectionGone(str(exc) or type(exc).__name__) from None
        return Completed(
            argv=tuple(argv),
            # -1 for a command killed by a signal, as asyncssh reports it.
            exit_status=result.exit_status if result.exit_status is not None else -1,
            stdout=_text(result.stdout),
            stderr=_text(result.stderr),
        )

    async def close(self) -> None:
        if self._connection is not None:
            await self._drop(self._connection)

    # -- the Forwarding interface (the login route) ---------------------------------------

    async def forward_remote(self, host: str, port: int) -> int:
        connection = await self._connect()
        try:
            listener = await connection.forward_remote_port("127.0.0.1", 0, host, port)
        except (asyncssh.Error, OSError) as exc:
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            raise TransportError(
                f"{self.login}: the login node refused to forward ({reason})"
            ) from None
        remote_port = listener.get_port()
        self._forwards[remote_port] = listener
        return remote_port

    async def cancel_forward(self, remote_port: int, host: str, port: int) -> None:
        listener = self._forwards.pop(remote_port, None)
        if listener is not None:
            listener.close()
            with contextlib.suppress(asyncssh.Error, OSError):
                await listener.wait_closed()

    async def start(self, argv: Sequence[str], stdin: bytes) -> RemoteProcess:
        connection = await self._connect()
        try:
            process = await connection.create_process(shlex.join(argv), encoding=None)
            process.stdin.write(stdin)
        except asyncssh.ChannelOpenError as exc:
            raise TransportError(f"{self.login}: no session ({exc.reason})") from None
        except (asyncssh.Error, OSError) as exc:
            await self._drop(connection)
            raise TransportError(f"{self.login}: connection lost ({exc})") from None
        return _LongProcess(process, self._clock)

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
                raise TransportError(self._no_handshake()) from None
            except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
                raise self._key_unreadable(str(exc)) from None
            except asyncssh.PermissionDenied:
                raise self._key_refused() from None
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


class _LongProcess:
    """A long-lived command on this connection (:class:`~fluksio.ssh.shell.RemoteProcess`)."""

    def __init__(self, process: asyncssh.SSHClientProcess[bytes], clock: Clock) -> None:
        self._process = process
        self._clock = clock

    async def readline(self) -> bytes:
        try:
            return await self._process.stdout.readline()
        except (asyncssh.Error, OSError):
            return b""

    async def write(self, data: bytes) -> None:
        with contextlib.suppress(asyncssh.Error, OSError, BrokenPipeError):
            self._process.stdin.write(data)
            await self._process.stdin.drain()

    async def stop(self) -> str:
        with contextlib.suppress(asyncssh.Error, OSError):
            self._process.stdin.write_eof()
        try:
            async with self._clock.timeout(5):
                said = await self._process.stderr.read()
                await self._process.wait(check=False)
        except (TimeoutError, asyncssh.Error, OSError):
            self._process.close()
            said = b""
        return _text(said)
