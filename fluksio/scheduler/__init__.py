"""Pure scheduling: node requests matched against worker inventories, every wait explained.

No I/O, no asyncio, no clock, nothing else of Fluksio: plain data in, decisions out. The
engine owns one :class:`Scheduler`, reports events to it, and calls :meth:`~Scheduler.
schedule` after each moment's events; each pass returns a :class:`Plan` of calls to start
(with their GPU indices and thread caps) and machines to ask provisioners for, and every
request left waiting has a :class:`WaitReason` a person can act on.

Example::

    >>> from fluksio.scheduler import ENGINE_ID, Profile, CallRequest, Scheduler, Worker
    >>> engine = Worker(id=ENGINE_ID, name="engine", slots=4, cpus=4, ram_mb=8192)
    >>> sched = Scheduler(engine, profiles=[
    ...     Profile("hpc", "gpu-small", frozenset({"gpu"}), cpus=8, gpus=1, ram_mb=65536)])
    >>> sched.add_worker(Worker(id="w1", name="gpu-a", labels=frozenset({"gpu"}),
    ...                         slots=2, cpus=16, gpus=4, ram_mb=131072))
    >>> sched.submit(CallRequest(id="r1", queued_at=1.0, label="gpu", gpus=2))
    >>> sched.submit(CallRequest(id="r2", queued_at=2.0, label="gpu", gpus=3))
    >>> sched.submit(CallRequest(id="r3", queued_at=3.0, label="gpu", gpus=8))
    >>> plan = sched.schedule()
    >>> [(p.request_id, p.worker_id, p.gpu_ids) for p in plan.placements]
    [('r1', 'w1', (0, 1))]
    >>> sched.reason("r2").text
    "1 worker carries 'gpu'; none has 3 GPUs free (gpu-a: 2 of 4 free); next in line on gpu-a"
    >>> sched.reason("r3").text
    "needs 8 GPUs; the largest worker or profile with 'gpu' has 4"
    >>> _ = sched.finish("r1")   # the call ended: exactly what it took is given back
    >>> [(p.request_id, p.gpu_ids) for p in sched.schedule().placements]
    [('r2', (0, 1, 2))]

The rules of a pass (order, best fit, holds against starvation, provisioning) are in
:mod:`fluksio.scheduler.scheduler`; :mod:`fluksio.scheduler.reference` states the same
rules as a plain loop over every request and every place, which the tests hold the fast
scheduler to and the benchmark measures against.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fluksio.scheduler.model import (
    ENGINE_ID,
    CallRequest,
    Container,
    Containers,
    Placement,
    PlaceView,
    Policy,
    Profile,
    ProvisionAsk,
    Provisioning,
    Resources,
    WaitKind,
    WaitReason,
    Worker,
    cap_reached,
    may_run,
)

if TYPE_CHECKING:
    from fluksio.scheduler.scheduler import DEFAULT_WALLTIME_MARGIN_S, Plan, Scheduler
    from fluksio.scheduler.state import Allocation

__all__ = [
    "DEFAULT_WALLTIME_MARGIN_S",
    "ENGINE_ID",
    "Allocation",
    "CallRequest",
    "Container",
    "Containers",
    "PlaceView",
    "Placement",
    "Plan",
    "Policy",
    "Profile",
    "ProvisionAsk",
    "Provisioning",
    "Resources",
    "Scheduler",
    "WaitKind",
    "WaitReason",
    "Worker",
    "cap_reached",
    "may_run",
]
_DECIDING = {
    "DEFAULT_WALLTIME_MARGIN_S": "fluksio.scheduler.scheduler",
    "Plan": "fluksio.scheduler.scheduler",
    "Scheduler": "fluksio.scheduler.scheduler",
    "Allocation": "fluksio.scheduler.state",
}


def __getattr__(name: str) -> object:
    # The deciding machinery is loaded when first named: a client that reads answers
    # naming a wait's kind needs the plain data above, not the scheduler.
    if name in _DECIDING:
        found: object = getattr(importlib.import_module(_DECIDING[name]), name)
        return found
    raise AttributeError(f"module 'fluksio.scheduler' has no attribute {name!r}")
