"""Grid Engine as a Fluksio provisioner: ``qsub``, ``qstat`` and ``qdel`` over SSH.

Built on :mod:`fluksio.provisioners` (the public provisioner API), nothing else of
Fluksio. The entry point is this module: it registers ``"type": "gridengine"``.
"""

from __future__ import annotations

from typing import Any

from fluksio.provisioners import Provisioner, hookimpl
from fluksio_gridengine.provisioner import GridEngineProvisioner
from fluksio_gridengine.settings import GridEngineProfile, GridEngineSettings

__all__ = ["GridEngineProfile", "GridEngineProvisioner", "GridEngineSettings"]


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [GridEngineProvisioner]
