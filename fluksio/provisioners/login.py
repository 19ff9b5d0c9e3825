"""A person's login, shared with the engine: a capability of some provisioners' shells.

A site that asks for a one-time code can be reached only through a login a person opened
(``fluksio provisioners login NAME``), which later commands share. Only a shell that can
share one (the system ``ssh`` with a master connection, :class:`~fluksio.ssh.SharedLogin`)
offers it, so it is not a method every provisioner inherits: a provisioner that runs its
system's commands in a shell exposes that shell as ``shell``, and the engine and the
command line ask :func:`shared_login` whether that shell can share a login.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from fluksio.ssh.shell import RemoteShell, SharedLogin

__all__ = ["OverAShell", "shared_login"]


@runtime_checkable
class OverAShell(Protocol):
    """A provisioner that runs its system's commands in a shell on a login host."""

    @property
    def shell(self) -> RemoteShell: ...


def shared_login(provisioner: Any) -> SharedLogin | None:
    """The shell through which ``provisioner`` shares a person's login, or None: it never
    needs a person (no shell, or one that logs in by itself with keys)."""
    if not isinstance(provisioner, OverAShell):
        return None
    shell = provisioner.shell
    return shell if isinstance(shell, SharedLogin) else None
