"""Commands on a login node over SSH: the one package that knows SSH.

Two implementations of :class:`~fluksio.ssh.shell.RemoteShell`, chosen per
provisioner (``"transport"`` in ``provisioners.json``; :func:`open_transport`):

- :class:`AsyncsshTransport` (``asyncssh``, the default): one connection opened on first use
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

The retry policy and the sentences both transports say are in :mod:`fluksio.ssh.base`;
:mod:`fluksio.ssh.asyncssh_transport` (asyncssh) and :mod:`fluksio.ssh.openssh` (the system
``ssh``) each say only how a command is run once.
"""

from __future__ import annotations

from pathlib import Path

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.ssh.asyncssh_transport import AsyncsshTransport
from fluksio.ssh.base import CONNECT_TIMEOUT_S, TRANSPORTS, CommandTimer, parse_login
from fluksio.ssh.openssh import OpenSSHTransport
from fluksio.ssh.shell import (
    Completed,
    RemoteShell,
    Route,
    SharedLogin,
    Transport,
    TransportError,
)

__all__ = [
    "CONNECT_TIMEOUT_S",
    "TRANSPORTS",
    "AsyncsshTransport",
    "CommandTimer",
    "Completed",
    "OpenSSHTransport",
    "RemoteShell",
    "Route",
    "SharedLogin",
    "Transport",
    "TransportError",
    "open_transport",
    "parse_login",
]


def open_transport(
    kind: Transport,
    login: str,
    key: str | None = None,
    *,
    known_hosts: str | None = None,
    trust_on_first_use: bool = False,
    ssh_config: str | None = None,
    control_path: Path | None = None,
    on_command: CommandTimer | None = None,
    clock: Clock | None = None,
) -> AsyncsshTransport | OpenSSHTransport:
    """The transport ``kind`` names; ``control_path`` is where OpenSSH shares its login;
    ``on_command`` is told of each command it runs, timed on ``clock`` (its owner's; None:
    the system's)."""
    clock = clock or SYSTEM_CLOCK
    if kind == "openssh":
        return OpenSSHTransport(
            login,
            key,
            known_hosts=known_hosts,
            trust_on_first_use=trust_on_first_use,
            ssh_config=ssh_config,
            control_path=control_path,
            on_command=on_command,
            clock=clock,
        )
    return AsyncsshTransport(
        login,
        key,
        known_hosts=known_hosts,
        trust_on_first_use=trust_on_first_use,
        ssh_config=ssh_config,
        on_command=on_command,
        clock=clock,
    )
