"""Provisioners: plugins and the built-in Slurm provisioner that add workers on demand.

The public API a plugin imports: subclass :class:`Provisioner` (with its settings and
profile models) and register it through :func:`~.hookspecs.fluksio_provisioner_types`; see
docs/writing-a-provisioner.md. A provisioner whose system is reached over SSH takes its
SSH options (:class:`SSHAccess`), hands its workers their tokens (:func:`delivering`,
:func:`token_lines`) and runs its commands (:func:`run_remote` on a :class:`RemoteShell`)
as the built-in ones do.
"""

from __future__ import annotations

from fluksio.provisioners.base import (
    JobState,
    JobStatus,
    ProfileSettings,
    Provisioner,
    ProvisionError,
    ProvisionerSettings,
    Submission,
    WorkerEvent,
    worker_argv,
)
from fluksio.provisioners.hookspecs import hookimpl
from fluksio.provisioners.ssh_access import (
    LOGIN_PATTERN,
    Delivery,
    SSHAccess,
    delivering,
    no_control,
    run_remote,
    token_file,
    token_lines,
)
from fluksio.ssh.shell import Completed, RemoteShell, TransportError

__all__ = [
    "LOGIN_PATTERN",
    "Completed",
    "Delivery",
    "JobState",
    "JobStatus",
    "ProfileSettings",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "RemoteShell",
    "SSHAccess",
    "Submission",
    "TransportError",
    "WorkerEvent",
    "delivering",
    "hookimpl",
    "no_control",
    "run_remote",
    "token_file",
    "token_lines",
    "worker_argv",
]
