"""A placed call made ready for its executor: arguments, secrets, environment; and what
its outcome says when its limit was its batch job's end."""

from __future__ import annotations

import dataclasses
from typing import Any

from fluksio.agent.protocol.frames import ContainerRef, RunFrame, RunRef
from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.machine.effects import CallInputs
from fluksio.engine.runs.machine.redact import secret_values
from fluksio.engine.runs.machine.signature import select_kwargs
from fluksio.engine.runs.views import Executor
from fluksio.engine.secrets import SecretStore, resolve_params
from fluksio.scheduler import ENGINE_ID, Placement
from fluksio.wire.provenance import Provenance

__all__ = ["call_frame", "stopped_at_job_end", "walltime_text"]


def call_frame(
    inputs: CallInputs, placement: Placement, executor: Executor, secrets: SecretStore
) -> tuple[RunFrame, tuple[str, ...]]:
    """The call as its executor runs it, and the secret values it was given (to blank in
    what it reports). Raises :class:`~fluksio.engine.secrets.SecretDenied` when a secret it
    names may not go where it was placed."""
    spec = inputs.spec
    available: dict[str, Any] = dict(inputs.params)
    resolved = resolve_params(
        spec.params,
        secrets,
        on_engine=placement.worker_id == ENGINE_ID,
        worker_labels=executor.labels,
    )
    available.update(resolved)
    available.update(inputs.item or {})
    available.update(inputs.results)
    # A node that sets no limit, placed where a job ends, may run until its margin.
    job_limit = placement.job_limit
    until_job_end = spec.limit is None and job_limit is not None and job_limit > 0
    call = RunFrame(
        call_id=placement.request_id,
        source=spec.code,
        node=spec.id,
        flow=inputs.run.flow,
        kwargs=select_kwargs(spec.code, available),
        run=RunRef(id=inputs.run.id),
        env={**_devices_env(placement), **executor.call_env(placement.request_id)},
        timeout=spec.timeout,
        limit=job_limit if until_job_end else spec.limit,
        # Told before its job's end stops it (the worker's --notice-s): it may save its state.
        until_job_end=until_job_end,
        ram_mb=spec.resources.ram_mb or None,  # none asked: the place's own memory, if known
        container=None
        if spec.container is None
        else ContainerRef(image=spec.container.image, runtime=spec.container.runtime),
        threads=placement.threads,
        # The state its node's call last saved, for ``fluksio.restored()`` to give back.
        restored=inputs.restored,
    )
    return call, secret_values(spec.params, resolved)


def _devices_env(placement: Placement) -> dict[str, str]:
    if placement.gpu_ids or placement.gpus == 0:
        # A call that asked for no GPUs sees none: it cannot take another call's card.
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in placement.gpu_ids)}
    return {}


def stopped_at_job_end(
    outcome: CallOutcome, provenance: Provenance, walltime_s: float | None, margin: float
) -> CallOutcome:
    """The outcome of a call whose limit was its job's end (its node set none): stopped
    there, it names the job and what to do, rather than a limit the node never set."""
    if outcome.ok or (outcome.error or {}).get("type") != ErrorKind.NODE_LIMIT:
        return outcome
    job = provenance.job or f"the job of worker {provenance.worker}"
    length = f" ({walltime_text(walltime_s)})" if walltime_s else ""
    said = (
        f"ran until {job}{length} had {margin:g} s left;"
        ' give the node a "limit" to be placed where it fits'
    )
    # Not the node's doing: run again on another job, within its max_checkpoints.
    error = error_record(ErrorKind.NODE_LIMIT, said)
    return dataclasses.replace(outcome, error=error, interrupted=True)


def walltime_text(seconds: float) -> str:
    """A walltime as Slurm writes one: ``04:00:00``."""
    whole = round(seconds)
    return f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
