"""Where a call ran: recorded with its node, so a result can always be traced to a machine.

A display name alone (``ran_on``) cannot tell two hosts running under one token apart, nor
say which batch job or GPUs a result came from. Each executor says where it is; the run
manager adds the GPUs the placement granted, and the record is stored with the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Provenance"]


@dataclass(frozen=True)
class Provenance:
    worker: str
    """The worker's display name; ``engine`` for calls on the engine."""
    host: str | None = None
    """The machine's host name, as it reported it (a published agent does not)."""
    slurm_job_id: str | None = None
    """The Slurm job the worker ran in, as the worker said."""
    batch_job: str | None = None
    """The batch job of the request that brought the worker, as its provisioner calls it
    (``"Grid Engine job 12"``, ``"worker gpu-box-1:4242"``)."""
    gpu_ids: tuple[int, ...] = field(default_factory=tuple)
    """The GPU indices the call was granted (its ``CUDA_VISIBLE_DEVICES``)."""
    provisioner: str | None = None
    """``provisioner/profile`` of the request that brought the worker, if one did."""
    request_id: str | None = None
    """That request's id (as in ``GET /workers/resources``)."""
    cached_bytes: int = 0
    """Bytes of the call's input artifacts the worker's cache held when it was placed:
    when more than none, what chose this worker among those that fit."""

    def to_json(self) -> dict[str, Any]:
        # Not asdict(): it deep-copies each field, and this runs at every write of a node.
        return {
            "worker": self.worker,
            "host": self.host,
            "slurm_job_id": self.slurm_job_id,
            "batch_job": self.batch_job,
            "gpu_ids": list(self.gpu_ids),
            "provisioner": self.provisioner,
            "request_id": self.request_id,
            "cached_bytes": self.cached_bytes,
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Provenance:
        return cls(**{**record, "gpu_ids": tuple(record.get("gpu_ids") or ())})

    @property
    def job(self) -> str | None:
        """The batch job it ran in, as people say it: its provisioner's name for it
        (``Grid Engine job 12``), else the Slurm job its worker said; None: none."""
        return self.batch_job or (f"Slurm job {self.slurm_job_id}" if self.slurm_job_id else None)

    def describe(self) -> str:
        """One line for people: ``gpu-box (host n1, Slurm job 41, GPUs 0,1)``."""
        parts = []
        if self.host and self.host != self.worker:
            parts.append(f"host {self.host}")
        if self.job:
            parts.append(self.job)
        if self.gpu_ids:
            parts.append(
                f"GPU{'s' if len(self.gpu_ids) > 1 else ''} {','.join(map(str, self.gpu_ids))}"
            )
        if self.provisioner:
            parts.append(f"brought by {self.provisioner} request {self.request_id}")
        if self.cached_bytes:
            parts.append(f"chosen for {_bytes(self.cached_bytes)} of its inputs in its cache")
        return f"{self.worker} ({', '.join(parts)})" if parts else self.worker


def _bytes(count: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"
