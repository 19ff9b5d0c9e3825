"""The hooks a provisioner plugin implements, all in this one module.

A plugin is a module (or object) registered under the ``fluksio.provisioners`` entry-point
group, exactly as the built-in Slurm provisioner is. pluggy calls hooks synchronously, so
hooks only *register* things; the asynchronous life cycle (submit, poll, cancel, close)
lives on the provisioner class a plugin registers (see :class:`~.base.Provisioner`).

Example, in a plugin's ``pyproject.toml``::

    [project.entry-points."fluksio.provisioners"]
    local = "fluksio_local.plugin"

and in ``fluksio_local/plugin.py``::

    from fluksio.provisioners import hookimpl

    @hookimpl
    def fluksio_provisioner_types():
        return [LocalProvisioner]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from fluksio.provisioners.base import Provisioner

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "fluksio"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- registration (called once, when the engine builds its plugin manager) -------------------


@hookspec
def fluksio_provisioner_types() -> list[type[Provisioner]]:  # type: ignore[empty-body]
    """Return the provisioner classes this plugin provides.

    Called once when the plugin manager is built, before ``provisioners.json`` is read.
    Each class names its ``type`` (the value of ``"type"`` in ``provisioners.json``) and
    declares its settings as a pydantic model (``settings_model``); the engine validates
    each configured provisioner with the model of its type. All plugins' answers are
    collected; two classes claiming one ``type`` is an error naming both plugins.
    """
