"""Commands on a login node over SSH: :class:`SSHTransport`, the one module that knows SSH.

It implements :class:`~fluksio.provisioners.shell.RemoteShell` over asyncssh.

The only module that imports asyncssh. One connection is opened on first use and kept, so
a poll costs one channel, not a login (asyncssh: ~50 ms per command on an open connection
against ~200 ms for a new OpenSSH process). A dropped connection is reopened once per
command, unless the command must run at most once (``sbatch``). Host keys are checked
against ``known_hosts`` (the config's ``UserKnownHostsFile``, else the user's, by default);
with ``trust_on_first_use`` a host that file does not know yet is accepted once and
written there, and a host whose key *changed* is refused either way.

The user's OpenSSH config is read (``ssh_config``, default ``~/.ssh/config``): ``login``
may be a ``Host`` alias, and its ``User``, ``Port``, ``IdentityFile`` and ``ProxyJump``
apply (a jump host is connected to with its own entry). Keys in the ssh-agent
(``SSH_AUTH_SOCK``) are offered. ``ssh_key`` and ``known_hosts``, when given, override
the config.

Commands travel as argv, quoted for the remote shell here and nowhere else; anything secret
travels on stdin, never in argv (``ps`` on the login node shows argv to every user).
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncssh

from fluksio.provisioners.shell import Completed, TransportError

__all__ = ["SSHTransport", "parse_login"]

CONNECT_TIMEOUT_S = 15.0
"""A login node that has not finished the SSH handshake by then (no banner, say) is down."""
# slurmctld being down makes squeue/sbatch retry for about 9 s before they fail: stay above.
COMMAND_TIMEOUT_S = 60.0


def parse_login(login: str) -> tuple[str | None, str, int | None]:
    """``[user@]host[:port]`` (``host`` may be a ``Host`` alias of the user's SSH config)
    as (user, host, port); what it leaves out is None, for the config to say."""
    user, at, rest = login.rpartition("@")
    host, _, port = rest.partition(":")
    return (user if at else None), host, (int(port) if port else None)


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


class SSHTransport:
    """Runs commands as ``login`` with ``key``; keeps one connection open between them."""

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
    ) -> None:
        self.login = login
        self._user, self._host, self._port = parse_login(login)
        self._key = Path(key).expanduser() if key else None
        self._explicit_known_hosts = known_hosts is not None
        self._known_hosts = Path(known_hosts or "~/.ssh/known_hosts").expanduser()
        self._ssh_config = Path(ssh_config or "~/.ssh/config").expanduser()
        self._config_named = ssh_config is not None
        self._trust_on_first_use = trust_on_first_use
        self._command_timeout_s = command_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._connection: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()

    async def run(
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
                async with asyncio.timeout(self._command_timeout_s):
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
        known = self._known_hosts
        port = self._port or 22
        if known.exists():
            name = self._host if port == 22 else f"[{self._host}]:{port}"
            if asyncssh.read_known_hosts(str(known)).match(self._host, "", port)[0]:
                return (
                    f"{self.login}: the host key CHANGED since it was recorded in {known}: the"
                    " login node was reinstalled, or someone is in the middle. Ask its admins"
                    f" for its key fingerprint, compare (ssh-keyscan -p {port}"
                    f" {self._host} | ssh-keygen -lf -), then replace the line for {name}"
                )
        return (
            f"{self.login}: the host key is not in {known} (add it with ssh-keyscan, or set"
            " trust_on_first_use)"
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
        if self._config_named and not self._ssh_config.is_file():
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
        elif self._explicit_known_hosts:
            if not known.is_file():
                raise TransportError(
                    f"{self.login}: known_hosts file {known} does not exist (name one with"
                    " known_hosts, or set trust_on_first_use)"
                )
            options["known_hosts"] = str(known)
        # Else the config's UserKnownHostsFile, or ~/.ssh/known_hosts: checked either way.
        return options


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else ""
