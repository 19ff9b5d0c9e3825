"""Provisioners: plugins and the built-in Slurm provisioner that add workers on demand.

The public API a plugin imports: subclass :class:`Provisioner` (with its settings and
profile models) and register it through :func:`~.hookspecs.fluksio_provisioner_types`; see
docs/writing-a-provisioner.md.
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

__all__ = [
    "JobState",
    "JobStatus",
    "ProfileSettings",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "Submission",
    "WorkerEvent",
    "hookimpl",
    "worker_argv",
]
