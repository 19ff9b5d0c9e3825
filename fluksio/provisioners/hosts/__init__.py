"""The built-in SSH hosts provisioner (``"type": "ssh"``): machines you own, a worker
started on one over SSH when a call needs what nothing attached can give.

Each host is a profile of at most one worker. Its worker starts detached (``setsid``, its
output to a log under ``~/.fluksio/hosts``), with its token in a 0600 file its script
reads and deletes, never in argv; its pid and start time are kept beside it, so a stop or
a poll never mistakes a later process that reuses the pid for it, and a restarted engine
finds it again by its request (``find``) instead of starting a second. ``max_idle_s``
ends it; the provision timeout, a cancel and the engine's shutdown stop it.

``settings.py`` (``provisioners.json``), ``script.py`` (the worker's script and what the
host prints), ``provisioner.py`` (the class), and the four shell programs it runs there.
"""

from __future__ import annotations

from typing import Any

from fluksio.provisioners.hookspecs import hookimpl
from fluksio.provisioners.hosts.provisioner import HostsProvisioner
from fluksio.provisioners.hosts.settings import HostProfile, HostsSettings
from fluksio.provisioners.provisioner import Provisioner

__all__ = ["HostProfile", "HostsProvisioner", "HostsSettings", "fluksio_provisioner_types"]


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [HostsProvisioner]
