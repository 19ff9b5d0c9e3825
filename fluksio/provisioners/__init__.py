"""Provisioners: pluggy hooks and the built-in Slurm provisioner that add workers on demand.

Plugins implement the hooks in :mod:`fluksio.provisioners.hookspecs` and register
:class:`~fluksio.provisioners.base.Provisioner` subclasses; see docs/provisioners.md.
"""

from __future__ import annotations

from fluksio.provisioners.base import (
    JobState,
    JobStatus,
    Profile,
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
    "Profile",
    "ProvisionError",
    "Provisioner",
    "ProvisionerSettings",
    "Submission",
    "WorkerEvent",
    "hookimpl",
    "worker_argv",
]
