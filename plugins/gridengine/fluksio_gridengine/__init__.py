"""Grid Engine as a Fluksio provisioner: ``qsub``, ``qstat`` and ``qdel`` over SSH.

Built on :mod:`fluksio.provisioners` (the public provisioner API) and
:func:`fluksio.ssh.open_transport`, nothing else of Fluksio.
"""

from __future__ import annotations

from fluksio_gridengine.provisioner import GridEngineProvisioner
from fluksio_gridengine.settings import GridEngineProfile, GridEngineSettings

__all__ = ["GridEngineProfile", "GridEngineProvisioner", "GridEngineSettings"]
