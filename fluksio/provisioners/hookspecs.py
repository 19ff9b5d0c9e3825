"""The hooks of a provisioner plugin, all in this one module.

A plugin is a module (or object) registered under the ``fluksio.provisioners`` entry-point
group, exactly as the built-in Slurm provisioner is. It answers
:func:`fluksio_provisioner_types` with its provisioner classes. The engine makes one
instance per entry of ``provisioners.json`` and registers it with the same plugin manager,
so the life-cycle hooks below reach it: each names the provisioner it is meant for, and
:class:`~fluksio.provisioners.base.Provisioner` answers the calls naming it by delegating
to the methods a subclass implements (``render``, ``submit``, ``poll``, ``cancel``). A
plugin author subclasses it and never writes these hook functions by hand.

pluggy calls hooks synchronously; the asynchronous ones return an awaitable, which the
engine awaits (``firstresult``: the one provisioner the call names answers, all others
return None).

Example, in a plugin's ``pyproject.toml``::

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

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from fluksio.provisioners.base import JobStatus, Provisioner, Submission, WorkerEvent

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


# -- the life cycle (called on the engine's event loop; answered by the named provisioner) --


@hookspec(firstresult=True)
def fluksio_provisioner_render(provisioner: str, profile: str, token_file: str) -> str | None:
    """Return exactly what ``provisioner`` would submit for ``profile`` (a dry run).

    Called by ``fluksio provisioners check --script`` and before each submission (the
    rendered text is what is submitted). Pure: no I/O. ``token_file`` is where the job
    finds its worker token, relative to the submitting user's home; the token itself is
    never part of the text.
    """


@hookspec(firstresult=True)
def fluksio_provisioner_submit(
    provisioner: str, profile: str, request_id: str, token: str
) -> Awaitable[Submission] | None:
    """Request one machine of ``profile``; return an awaitable of the accepted submission.

    Called when a queued node needs capacity nothing attached could ever give and no
    request for ``profile`` is outstanding (so at most one per profile at a time).
    ``token`` is a worker token minted for this request alone (24 h, the profile's
    labels): deliver it to the machine's worker without putting it in argv, a job's
    environment listing or logs. Raising :class:`~fluksio.errors.FluksioError` with the
    outside system's own words records them as the profile's last error; the engine
    retries with capped backoff.
    """


@hookspec(firstresult=True)
def fluksio_provisioner_poll(
    provisioner: str, job_ids: list[str]
) -> Awaitable[Mapping[str, JobStatus]] | None:
    """Report the state of the given requests; return an awaitable of job id -> status.

    Called once per poll interval with every request of ``provisioner`` still alive, so a
    provisioner should answer them all in one round trip (Slurm: one ``squeue``). A job
    left out of the answer has left the system: the engine treats it as ended.
    """


@hookspec(firstresult=True)
def fluksio_provisioner_cancel(provisioner: str, job_id: str) -> Awaitable[None] | None:
    """Withdraw request ``job_id``; return an awaitable that completes once it is sent.

    Called when a request outlives ``provision_timeout_s`` without its worker attaching,
    and for every pending request when the engine stops. Cancelling a job that already
    ended must succeed quietly.
    """


# -- events (broadcast to every provisioner; nothing is returned) -----------------------------


@hookspec
def fluksio_worker_attached(worker: WorkerEvent) -> None:
    """A worker attached to the engine.

    ``worker.provisioner`` and ``worker.request_id`` are set (from its signed token) when a
    request of that provisioner brought it, so a provisioner can tie the worker to what it
    asked for; the engine itself marks the request fulfilled.
    """


@hookspec
def fluksio_worker_gone(worker: WorkerEvent) -> None:
    """A worker detached: it exited (``--max-idle``), its machine ended, or its connection was lost.

    Called after the engine has failed the worker's calls in flight. The request that brought
    the worker is not ended here: its job's own end (seen at the next poll) ends it and
    revokes its token, since a worker may drop and reattach while its job runs on.
    """
