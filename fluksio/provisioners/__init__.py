"""Provisioners: plugins and the built-in Slurm provisioner that add workers on demand.

The public API a plugin imports: subclass :class:`Provisioner` (with its settings and
profile models) and register it through :func:`~.hookspecs.fluksio_provisioner_types`; see
docs/writing-a-provisioner.md. A batch system reached over SSH subclasses
:class:`BatchProvisioner` (settings: :class:`BatchSettings`) and declares only its
commands, its job script and how to read its answers. Anything else over SSH takes its
options (:class:`SSHAccess`), hands its workers their tokens (:func:`delivering`,
:func:`token_lines`), runs its commands (:func:`run_remote` on a :class:`RemoteShell`) and
offers the login route (:class:`WayIn`, over :class:`LoginRoute`) as the built-in ones do.
"""

from __future__ import annotations

from fluksio.provisioners.base import (
    JobState,
    JobStatus,
    ProfileSettings,
    ProvisionError,
    ProvisionerSettings,
    SiteLimit,
    Submission,
    WorkerEvent,
    WorkerRecord,
    worker_argv,
)
from fluksio.provisioners.batch import (
    JOB_OUTPUT_DIR,
    BatchProfile,
    BatchProvisioner,
    BatchSettings,
    QueuedJob,
    batch_options,
    worker_line,
)
from fluksio.provisioners.hookspecs import hookimpl
from fluksio.provisioners.login_route import LoginRoute, RouteDown
from fluksio.provisioners.provisioner import EngineLink, Provisioner
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
from fluksio.provisioners.way_in import WayIn
from fluksio.ssh.shell import Completed, RemoteShell, TransportError

__all__ = [
    "JOB_OUTPUT_DIR",
    "LOGIN_PATTERN",
    "BatchProfile",
    "BatchProvisioner",
    "BatchSettings",
    "Completed",
    "Delivery",
    "EngineLink",
    "JobState",
    "JobStatus",
    "LoginRoute",
    "ProfileSettings",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "QueuedJob",
    "RemoteShell",
    "RouteDown",
    "SSHAccess",
    "SiteLimit",
    "Submission",
    "TransportError",
    "WayIn",
    "WorkerEvent",
    "WorkerRecord",
    "batch_options",
    "delivering",
    "hookimpl",
    "no_control",
    "run_remote",
    "token_file",
    "token_lines",
    "worker_argv",
    "worker_line",
]
