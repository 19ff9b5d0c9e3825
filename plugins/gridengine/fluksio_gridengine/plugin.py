"""The entry point: registers ``"type": "gridengine"``."""

from __future__ import annotations

from typing import Any

from fluksio.provisioners import Provisioner, hookimpl
from fluksio_gridengine.provisioner import GridEngineProvisioner


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [GridEngineProvisioner]
