"""Calls run in a container: the node names an image, the worker runs it with its runtime.

Nothing of Fluksio's is needed in the image, only a ``python3`` (3.9 or later): the
runner, one standard-library file, is mounted read-only and started there; the call's
spec arrives on its standard input, its output and records come back on descriptors, as
for a call on the host (:mod:`fluksio.agent.runner`).

A runtime is one small class (:class:`~.base.ContainerRuntime`): how it is checked, how
an image is made ready, the argv that runs a call, and how a call is signalled. Podman is
built and tested here; apptainer is written to the same interface (see its module).
"""

from __future__ import annotations

from fluksio.agent.containers.apptainer import Apptainer
from fluksio.agent.containers.base import ContainerError, ContainerRuntime, Mount
from fluksio.agent.containers.podman import Podman

__all__ = ["RUNTIMES", "Apptainer", "ContainerError", "ContainerRuntime", "Mount", "Podman"]

RUNTIMES: dict[str, type[ContainerRuntime]] = {"podman": Podman, "apptainer": Apptainer}
"""The runtimes ``fluksio-worker --containers`` accepts, by name."""
