"""What the scheduler's tests start from: the engine as a place, and a worker in one line."""

from __future__ import annotations

import fnmatch

from hypothesis import strategies as st

from fluksio.scheduler import ENGINE_ID, CallRequest, Container, Containers, Scheduler, Worker

__all__ = [
    "ENGINE",
    "INPUTS",
    "MARGIN",
    "NOW",
    "allowed",
    "allows_container",
    "containers",
    "placed",
    "worker",
]

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
    containers: Containers | None = None,
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
        containers=containers,
    )


NOW = 10_000.0
INPUTS = [
    ("sha256:" + c * 64, size) for c, size in (("a", 50 << 20), ("b", 50 << 20), ("c", 1 << 20))
]
"""Input artifacts requests may name: two alike in size (a tie the cache must break), one small."""
"""Every pass runs at this time: jobs end 100 s or 10,000 s after it, or never."""
MARGIN = 60.0


def placed(scheduler: Scheduler) -> dict[str, str]:
    """One pass: which place each request placed went to."""
    return {p.request_id: p.worker_id for p in scheduler.schedule().placements}


# What a place or profile allows, and what a request runs in: an exact name, a pattern,
# and none (most places run no container; most requests ask for none).
allowed = st.sampled_from(
    [
        None,
        None,
        Containers("podman", ("cuda:12",)),
        Containers("podman", ("cuda:*", "debian:12")),
        Containers("apptainer", ("cuda:*",)),
    ]
)
containers = st.sampled_from(
    [
        None,
        None,
        None,
        Container("cuda:12"),
        Container("cuda:11", "podman"),
        Container("debian:12"),
        Container("cuda:12", "apptainer"),
    ]
)


def allows_container(worker: Worker, request: CallRequest) -> bool:
    """Whether ``worker`` may run ``request``'s container (restated, not imported)."""
    asked, offered = request.container, worker.containers
    if asked is None:
        return True
    return (
        offered is not None
        and asked.runtime in (None, offered.runtime)
        and any(fnmatch.fnmatchcase(asked.image, pattern) for pattern in offered.images)
    )
