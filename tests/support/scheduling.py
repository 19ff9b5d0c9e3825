"""What the scheduler's tests start from: the engine as a place, and a worker in one line."""

from __future__ import annotations

from fluksio.scheduler import ENGINE_ID, Worker

__all__ = ["ENGINE", "worker"]

ENGINE = Worker(id=ENGINE_ID, name="engine", slots=4, cpus=8, ram_mb=16384)
"""The engine as a place: 4 slots, 8 cpus, 16 GiB, no GPU and no label."""


def worker(
    worker_id: str,
    *labels: str,
    name: str | None = None,
    slots: int = 4,
    cpus: int | None = 16,
    gpus: int | None = 0,
    ram_mb: int | None = 65536,
    pipeline: int = 0,
) -> Worker:
    """An attached worker with ``labels``, named after its id unless ``name`` is given."""
    return Worker(
        id=worker_id,
        name=name or worker_id,
        labels=frozenset(labels),
        slots=slots,
        cpus=cpus,
        gpus=gpus,
        ram_mb=ram_mb,
        pipeline=pipeline,
    )
