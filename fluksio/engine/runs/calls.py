"""A placed call made ready for its executor: arguments, secrets, environment."""

from __future__ import annotations

from typing import Any

from fluksio.agent.launcher import CallSpec
from fluksio.agent.runner import THREAD_VARIABLES
from fluksio.engine.runs.effects import CallInputs
from fluksio.engine.runs.redact import secret_values
from fluksio.engine.runs.signature import select_kwargs
from fluksio.engine.runs.views import Executor
from fluksio.engine.secrets import SecretStore, resolve_params
from fluksio.scheduler import ENGINE_ID, Placement

__all__ = ["call_spec"]


def call_spec(
    inputs: CallInputs, placement: Placement, executor: Executor, secrets: SecretStore
) -> tuple[CallSpec, tuple[str, ...]]:
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
    available.update(inputs.results)
    call = CallSpec(
        call_id=placement.request_id,
        source=spec.code,
        node=spec.id,
        flow=inputs.run.flow,
        kwargs=select_kwargs(spec.code, available),
        env={**_placement_env(placement), **executor.call_env()},
        timeout=spec.timeout,
        limit=spec.limit or 0.0,
        run_id=inputs.run.id,
    )
    return call, secret_values(spec.params, resolved)


def _placement_env(placement: Placement) -> dict[str, str]:
    env: dict[str, str] = {}
    if placement.threads is not None:
        env.update(dict.fromkeys(THREAD_VARIABLES, str(placement.threads)))
    if placement.gpu_ids or placement.gpus == 0:
        # A call that asked for no GPUs sees none: it cannot take another call's card.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in placement.gpu_ids)
    return env
