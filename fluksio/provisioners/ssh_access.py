"""What every provisioner that reaches its machines over SSH shares: its fields in
``provisioners.json``, how a shell is opened from them, and how a worker gets its token.

The Slurm provisioner (one login node) and the SSH hosts provisioner (machines you own,
each its own login) take the same SSH options, open their shells the same way, and hand
a worker its token and the engine's CA the same way: over stdin, to files only the login
user can read, which the worker's script reads, names or deletes (never argv).
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fluksio.clock import Clock
from fluksio.provisioners.base import ProvisionError
from fluksio.ssh import AsyncsshTransport, CommandTimer, OpenSSHTransport, open_transport
from fluksio.ssh.shell import Completed, RemoteShell, Transport, TransportError

__all__ = [
    "LOGIN_PATTERN",
    "Delivery",
    "SSHAccess",
    "ca_file",
    "delivering",
    "no_control",
    "run_remote",
    "token_file",
    "token_lines",
]

LOGIN_PATTERN = r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:[0-9]{1,5})?$"
"""``user@host[:port]``, or a ``Host`` alias of ``ssh_config``."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DELIVER = (files("fluksio.provisioners") / "deliver.sh").read_text(encoding="utf-8")
"""The start of every program that hands a worker its token and CA (``deliver.sh``)."""


def no_control(values: list[str], what: str) -> list[str]:
    for value in values:
        if _CONTROL.search(value):
            raise ValueError(f"{what} must not contain control characters (newlines, tabs)")
    return values


class SSHAccess(BaseModel):
    """The SSH options of ``provisioners.json``, the same for every provisioner over SSH."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    ssh_key: str | None = Field(default=None, min_length=1)
    """The private key to log in with (default: the config's ``IdentityFile``, the
    ssh-agent's keys, and the user's default keys)."""
    known_hosts: str | None = None
    """Host keys to check against (default: the config's ``UserKnownHostsFile``, else
    ``~/.ssh/known_hosts``)."""
    ssh_config: str | None = None
    """The OpenSSH client config to read (default: ``~/.ssh/config`` if it exists)."""
    trust_on_first_use: bool = False
    """Accept and remember an unknown host key once; off by default."""
    transport: Transport = "asyncssh"
    """How SSH is spoken: ``asyncssh`` (in the engine, the default) or ``openssh`` (the
    system ``ssh``: everything the user's OpenSSH does, one shared connection, and
    ``fluksio provisioners login`` for sites that ask for a one-time code)."""
    worker_command: str = "fluksio-worker"
    route: Literal["direct", "login"] = "direct"
    """How its workers reach the engine: ``direct`` (they open a connection to
    ``engine_url`` themselves) or ``login`` (through this provisioner's own SSH connection,
    for machines with no route out: a batch system's compute nodes dial its login node, an
    SSH host dials its own loopback)."""
    login_address: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$", max_length=253
    )
    """With ``route: login``: the login node's name or address as compute nodes reach it
    (default: the host SSH connects to); an IPv6 address in brackets."""
    ca_file: str | None = Field(default=None, min_length=1)
    """PEM certificates of a private CA the workers must trust for ``engine_url``. Read at
    each start and written beside the token on the machine; the worker's script only
    names that file."""

    @field_validator("ca_file")
    @classmethod
    def _readable_pem(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                text = Path(value).expanduser().read_text(errors="replace")
            except OSError as exc:
                raise ValueError(f"{value} cannot be read ({exc.strerror})") from None
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise ValueError(f"{value} holds no PEM certificate")
        return value

    @field_validator("engine_url", "worker_command", check_fields=False)
    @classmethod
    def _single_line(cls, value: str) -> str:
        no_control([value], "this field")
        return value

    @field_validator("other_engine_urls", check_fields=False)
    @classmethod
    def _single_lines(cls, value: list[str]) -> list[str]:
        no_control(value, "this field")
        return value

    @model_validator(mode="after")
    def _login_address_needs_the_login_route(self) -> Self:
        if self.login_address is not None and self.route != "login":
            raise ValueError('login_address is used only with "route": "login"')
        return self

    def open_shell(
        self,
        login: str,
        key: str | None,
        control_path: Path | None,
        on_command: CommandTimer | None = None,
        clock: Clock | None = None,
    ) -> AsyncsshTransport | OpenSSHTransport:
        """SSH to ``login`` with these options (``key`` overrides ``ssh_key``), telling
        ``on_command`` of each command it runs, its waits on ``clock`` (the provisioner's:
        the engine's)."""
        return open_transport(
            self.transport,
            login,
            key or self.ssh_key,
            known_hosts=self.known_hosts,
            trust_on_first_use=self.trust_on_first_use,
            ssh_config=self.ssh_config,
            control_path=control_path,
            on_command=on_command,
            clock=clock,
        )


def token_file(request_id: str) -> str:
    """Where a request's worker finds its token, relative to the login user's home."""
    return f".fluksio/tokens/{request_id}"


def ca_file(provisioner: str) -> str:
    """Where a provisioner's workers find its ``ca_file``, relative to the login user's
    home (one per provisioner, replaced at each start: a CA is public, and may rotate)."""
    return f".fluksio/ca/{provisioner}.pem"


def _ca_line(path: str) -> str:
    """The ``ca_file`` as one line for stdin, read afresh: a CA may be rotated."""
    pem = Path(path).expanduser()
    try:
        return base64.b64encode(pem.read_bytes()).decode()
    except OSError as exc:
        raise ProvisionError(f"ca_file {pem} cannot be read ({exc.strerror})") from None


def token_lines(access: SSHAccess, provisioner: str, request_id: str) -> list[str]:
    """The worker script's lines that take its token from its file (then deleted) and
    name the engine's CA, if any."""
    path = '"$HOME"/' + shlex.quote(token_file(request_id))
    lines = [
        "# The worker token: read from a file written at submission, then deleted.",
        f"FLUKSIO_WORKER_TOKEN=$(cat -- {path})",
        f"rm -f -- {path}",
        "export FLUKSIO_WORKER_TOKEN",
    ]
    if access.ca_file is not None:
        lines.append(f'export FLUKSIO_WORKER_CA_FILE="$HOME"/{shlex.quote(ca_file(provisioner))}')
    return lines


@dataclass(frozen=True)
class Delivery:
    """A remote command that stores a worker's token (and the engine's CA) first, then runs
    a program: what to run, and what to send it on stdin."""

    argv: list[str]
    stdin: str


def delivering(
    access: SSHAccess,
    provisioner: str,
    *,
    request_id: str,
    token: str,
    program: str,
    name: str,
    args: Sequence[str] = (),
    then: str = "",
) -> Delivery:
    """``program`` (shell text) run after ``deliver.sh`` has written the request's token
    file (and the CA file), as ``sh -c ... NAME TOKEN_FILE CA_FILE ARGS...``; ``then`` is
    what the program reads on stdin after them (a job script). The token travels on stdin
    only."""
    carried, ca_path = f"{token}\n", ""
    if access.ca_file is not None:
        carried += f"{_ca_line(access.ca_file)}\n"
        ca_path = ca_file(provisioner)
    argv = ["sh", "-c", _DELIVER + program, name, token_file(request_id), ca_path, *args]
    return Delivery(argv, carried + then)


async def run_remote(
    shell: RemoteShell, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
) -> Completed:
    """Run a command on ``shell``; SSH's failure becomes the :class:`ProvisionError` the
    engine reads (``uncertain`` when it may have run, ``login_needed`` when a person must
    log in first, else ``unreachable``: it never ran)."""
    try:
        return await shell.run(argv, stdin, once=once)
    except TransportError as exc:
        raise ProvisionError(
            exc.detail,
            uncertain=exc.may_have_run,
            login_needed=exc.login_needed,
            unreachable=not exc.may_have_run and not exc.login_needed,
        ) from None
