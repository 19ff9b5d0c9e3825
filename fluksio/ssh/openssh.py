"""SSH through the system ``ssh`` client: batch mode, one shared master connection."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import re
import shlex
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Unpack

from fluksio.clock import Clock
from fluksio.ssh.base import (
    _MAX_SOCKET_PATH,
    ENGINE_MASTER_PERSIST_S,
    BaseTransport,
    ConnectionGone,
    Options,
    _changed_key_message,
    _last_line,
    _option,
    _private_directory,
    _text,
    _unknown_key_message,
)
from fluksio.ssh.shell import Completed, RemoteProcess, Route, Transport, TransportError

__all__ = ["OpenSSHTransport"]


_NEVER_RAN = re.compile(
    r"Could not resolve hostname|Connection refused|No route to host|Network is unreachable"
    r"|connect to host .* Connection timed out|Connection timed out during banner exchange"
    r"|kex_exchange_identification|Connection closed by .* port \d+$",
    re.MULTILINE,
)
_REFUSED = re.compile(r"Permission denied \(([^)]*)\)")
_INTERACTIVE = frozenset({"keyboard-interactive", "password"})


class OpenSSHTransport(BaseTransport):
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

    async def _attempt(self, argv: Sequence[str], stdin: str | None) -> Completed:
        """Run ``argv`` there, through the shared connection when there is one."""
        await self._ensure_master()
        status, stdout, stderr = await self._ssh_command(
            ["-o", "ControlMaster=no", "-T", "--", self._host, shlex.join(argv)],
            stdin=stdin,
            what=argv[0],
        )
        if status != 255:
            return Completed(tuple(argv), status, stdout, stderr)
        if _NEVER_RAN.search(stderr) or _REFUSED.search(stderr) or "verification" in stderr:
            raise self._refusal(stderr)
        raise ConnectionGone(_last_line(stderr) or "ssh exited with status 255")

    async def close(self) -> None:
        """Close the master this engine opened (a person's login stays for the next)."""
        if self._own_master:
            self._own_master = False
            await self._ssh_command(["-O", "exit", "--", self._host], what="ssh -O exit")

    # -- the Forwarding interface (the login route), through the shared connection ------

    async def forward_remote(self, host: str, port: int) -> int:
        if self._wanted_control_path is None:
            raise TransportError(f"{self.login}: forwarding needs the shared connection's socket")
        await self._ensure_master()
        status, out, err = await self._ssh_command(
            ["-O", "forward", "-R", f"127.0.0.1:0:{_bracketed(host)}:{port}", "--", self._host],
            what="ssh -O forward",
        )
        if status != 0 or not out.strip().isdigit():
            said = _last_line(err) or _last_line(out) or f"ssh exited with status {status}"
            raise TransportError(f"{self.login}: the login node refused to forward ({said})")
        return int(out.strip())

    async def cancel_forward(self, remote_port: int, host: str, port: int) -> None:
        if self._wanted_control_path is not None and await self._master_running():
            forward = f"127.0.0.1:{remote_port}:{_bracketed(host)}:{port}"
            await self._ssh_command(
                ["-O", "cancel", "-R", forward, "--", self._host],
                what="ssh -O cancel",
            )

    async def start(self, argv: Sequence[str], stdin: bytes) -> RemoteProcess:
        await self._ensure_master()
        command = [*self._base_argv(), "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-T"]
        try:
            process = await asyncio.create_subprocess_exec(
                *command, "--", self._host, shlex.join(argv),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise TransportError(f"{self.login}: cannot run {self._ssh}: {exc.strerror}") from None
        long_lived = _LongProcess(process, self._clock)
        await long_lived.write(stdin)
        return long_lived

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
            raise self._key_unreadable(said or "ssh-keygen refused it")
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
                raise self._no_answer(what) from None
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
        return self._key_refused()

    def _unreachable(self, stderr: str) -> str:
        port = self._port or 22
        if "HOST IDENTIFICATION HAS CHANGED" in stderr:
            known = self._known_hosts or "known_hosts"
            return _changed_key_message(self.login, known, self._host, port)
        if "Host key verification failed" in stderr:
            return _unknown_key_message(self.login, str(self._known_hosts or "~/.ssh/known_hosts"))
        if "banner exchange" in stderr:
            return self._no_handshake()
        return f"cannot reach {self.login}: {_last_line(stderr) or 'ssh failed'}"


class _LongProcess:
    """A long-lived ``ssh`` command (:class:`~fluksio.ssh.shell.RemoteProcess`)."""

    def __init__(self, process: asyncio.subprocess.Process, clock: Clock) -> None:
        self._process = process
        self._clock = clock

    async def readline(self) -> bytes:
        assert self._process.stdout is not None
        return await self._process.stdout.readline()

    async def write(self, data: bytes) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):  # BrokenPipeError, ConnectionResetError
            self._process.stdin.write(data)
            await self._process.stdin.drain()

    async def stop(self) -> str:
        assert self._process.stdin is not None and self._process.stderr is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()
        try:
            async with self._clock.timeout(5):
                said = await self._process.stderr.read()
                await self._process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGKILL)
            await self._process.wait()
            said = b""
        return _text(said)


def _bracketed(host: str) -> str:
    """A host as ``-R`` takes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host
