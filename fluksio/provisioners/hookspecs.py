"""The hooks of a Fluksio plugin, all in this one module.

A plugin is a module (or object) registered under the ``fluksio.provisioners`` entry-point
group, exactly as the built-in Slurm provisioner is. Hooks are for what *extends* the
engine, and there are three:

- registration: :func:`fluksio_provisioner_types`, the provisioner classes a plugin adds;
- events: :func:`fluksio_worker_attached` and :func:`fluksio_worker_gone`, broadcast to
  every plugin (an auditor, a notifier, a provisioner that tracks its machines).

A provisioner's life cycle is *not* a hook: the engine makes one instance of a registered
class per entry of ``provisioners.json`` and awaits its methods (``render``, ``submit``,
``poll``, ``cancel``, ``check``, ``close``) directly; see
:class:`~fluksio.provisioners.base.Provisioner`.

pluggy calls hooks synchronously, on the engine's event loop: an implementation must not
block. Example, in a plugin's ``pyproject.toml``::

    [project.entry-points."fluksio.provisioners"]
    local = "fluksio_local.plugin"

and in ``fluksio_local/plugin.py``::

    from fluksio.provisioners import hookimpl

    @hookimpl
    def fluksio_provisioner_types():
        return [LocalProvisioner]

docs/writing-a-provisioner.md walks through a whole plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from fluksio.provisioners.base import WorkerRecord
    from fluksio.provisioners.provisioner import Provisioner

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "fluksio"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- registration (called once, when the engine builds its plugin manager) -------------------


@hookspec
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:  # type: ignore[empty-body]
    """Return the provisioner classes this plugin provides.

    Called once when the plugin manager is built, before ``provisioners.json`` is read.
    All plugins' answers are collected (not ``firstresult``).

    :return:
        A list of :class:`~fluksio.provisioners.base.Provisioner` subclasses. Each names
        its ``type_name`` (the value of ``"type"`` in ``provisioners.json``) and its
        ``settings_model``, the pydantic model each configured entry of that type is
        validated with. Two classes claiming one ``type_name`` is an error naming both
        plugins; ``provisioners.json`` is then refused.
    """


# -- events (broadcast to every plugin; nothing is returned) ---------------------------------


@hookspec
def fluksio_worker_attached(worker: WorkerRecord) -> None:
    """A worker attached to the engine and may now be given calls.

    Called on the engine's event loop after the worker's hello was accepted, for every
    plugin that implements it. The engine has already marked the provisioning request
    that brought the worker (if any) fulfilled.

    :param worker:
        The worker: its id, display name and labels, and, when a provisioning request
        brought it, the ``provisioner``, ``profile`` and ``request_id`` signed in its
        token and the ``job_id`` it reported itself (``SLURM_JOB_ID``).
    :return: Nothing; return values are ignored.
    """


@hookspec
def fluksio_worker_gone(worker: WorkerRecord) -> None:
    """A worker detached: it exited (``--max-idle``), its machine ended, or its socket closed.

    Called after the engine has failed the worker's calls in flight. The request that
    brought the worker is not ended here: its job's own end (seen at the next poll) ends
    it and revokes its token, since a worker may drop and reattach while its job runs on.

    :param worker: The same :class:`~fluksio.provisioners.base.WorkerRecord` as at attach.
    :return: Nothing; return values are ignored.
    """
