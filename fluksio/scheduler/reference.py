"""The scheduling rules as a plain loop: every request against every place, every pass.

This is the specification in executable form and the naive baseline of
``bench/scheduler.py``. It shares no indexes with :class:`~.scheduler.Scheduler`, and
restates every rule it applies (what a request needs, what covers it, what a profile
brings, whose job lives long enough) rather than importing the implementation's, so a
bug in one of those is a difference the property tests find, not one both agree on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from fluksio.scheduler.model import (
    ENGINE_ID,
    CallRequest,
    Containers,
    Placement,
    Policy,
    Profile,
    ProvisionAsk,
    image_matches,
)
from fluksio.scheduler.plan import Plan, Snapshot
from fluksio.scheduler.resources import Amounts
from fluksio.scheduler.state import PlaceState

__all__ = ["reference_plan"]

_UNSTATED = 2**63
"""What a profile does not state: more than any request asks."""


def _need_of(request: CallRequest) -> Amounts:
    """Its GPUs, cores and memory (none asked: none), and one slot."""
    return Amounts(request.gpus or 0, request.cpus or 0, request.ram_mb or 0, 1)


def _covers(have: Amounts, need: Amounts) -> bool:
    """Every amount at least what is needed."""
    return (
        have.gpus >= need.gpus
        and have.cpus >= need.cpus
        and have.ram_mb >= need.ram_mb
        and have.slots >= need.slots
    )


def _profile_amounts(profile: Profile) -> Amounts:
    """What one machine of a profile brings: what it does not state, without bound."""
    stated = (profile.gpus, profile.cpus, profile.ram_mb)
    gpus, cpus, ram_mb = (_UNSTATED if amount is None else amount for amount in stated)
    return Amounts(gpus, cpus, ram_mb, _UNSTATED)


def _long_enough(profile: Profile, limit: float | None, margin: float) -> bool:
    """A job of the profile outlives the request's limit and the margin (no limit: the
    margin and the profile's notice, strictly)."""
    walltime = math.inf if profile.walltime_s is None else profile.walltime_s
    return margin + profile.notice_s < walltime if limit is None else limit + margin <= walltime


def _allows(containers: Containers | None, request: CallRequest) -> bool:
    """A request in no container runs anywhere; one in a container where containers run,
    by the runtime it names if it names one, and a pattern matches its image."""
    asked = request.container
    if asked is None:
        return True
    if containers is None or (asked.runtime is not None and asked.runtime != containers.runtime):
        return False
    return any(image_matches(pattern, asked.image) for pattern in containers.images)


def _in_time(place: PlaceState, request: CallRequest, snapshot: Snapshot) -> bool:
    ends_at = place.worker.ends_at
    if ends_at is None:
        return True
    if snapshot.now is None:
        return False
    if request.limit is None:
        return snapshot.now + snapshot.walltime_margin_s + place.worker.notice_s < ends_at
    return snapshot.now + request.limit + snapshot.walltime_margin_s <= ends_at


def _choose(
    request: CallRequest, fitting: list[PlaceState], snapshot: Snapshot
) -> tuple[PlaceState, float | None]:
    """Its image held ready, then the most of its inputs cached, then the best fit; for a
    request without a limit, the most time left first, and the time left less the margin
    as its limit where the job ends."""

    def cached(place: PlaceState) -> int:
        return place.cached_bytes(request.inputs)

    def held(place: PlaceState) -> bool:
        return request.container is not None and request.container.image in place.images

    if request.limit is not None:
        return min(fitting, key=lambda p: (-held(p), -cached(p), p.free_key())), None

    def ends(place: PlaceState) -> float:
        return math.inf if place.worker.ends_at is None else place.worker.ends_at

    best = min(fitting, key=lambda p: (-ends(p), -held(p), -cached(p), p.free_key()))
    if best.worker.ends_at is None or snapshot.now is None:
        return best, None
    return best, best.worker.ends_at - snapshot.now - snapshot.walltime_margin_s


def _candidates(
    request: CallRequest, places: list[PlaceState], need: Amounts, snapshot: Snapshot
) -> list[PlaceState]:
    engine = [p for p in places if p.id == ENGINE_ID and _allows(p.worker.containers, request)]
    if request.label is None:
        return engine
    carrying = [
        p
        for p in places
        if p.id != ENGINE_ID
        and request.label in p.worker.labels
        and _in_time(p, request, snapshot)
        and _allows(p.worker.containers, request)
    ]
    if request.policy is Policy.PREFER and not any(_covers(p.capacity, need) for p in carrying):
        return engine
    return carrying


def _smallest_profile(
    request: CallRequest, need: Amounts, profiles: Iterable[Profile], snapshot: Snapshot
) -> Profile | None:
    """The profile to ask for ``request``: of those whose machine fits it, in time, one that
    can bring a machine now first (a request under way, or not at max_workers, not resting
    and not paused), then the smallest."""
    if request.label is None:
        return None
    fitting = [
        p
        for p in profiles
        if request.label in p.labels
        and _covers(_profile_amounts(p), need)
        and _long_enough(p, request.limit, snapshot.walltime_margin_s)
        and _allows(p.containers, request)
    ]

    def key(p: Profile) -> tuple[bool, Amounts, str]:
        state = p.provisioning
        ready = state.under_way or (
            state.resting_until is None and not state.paused and state.jobs < p.max_workers
        )
        return (not ready, _profile_amounts(p), p.key)

    return min(fitting, key=key, default=None)


def reference_plan(snapshot: Snapshot) -> Plan:
    places = [PlaceState(worker) for worker in snapshot.places]
    by_id = {p.id: p for p in places}
    for _request, allocation in snapshot.running:
        place = by_id[allocation.place_id]
        place.used = place.used.plus(allocation.taken)
        place.free_gpu_ids = [i for i in place.free_gpu_ids if i not in allocation.gpu_ids]
    for place_id, digests in snapshot.cached:
        by_id[place_id].cached = digests
    for place_id, images in snapshot.images:
        by_id[place_id].images = images
    profiles = {p.key: p for p in snapshot.profiles}
    targets = dict(snapshot.targets)
    paused = frozenset(snapshot.paused)

    placements: list[Placement] = []
    asks: list[ProvisionAsk] = []
    holds: dict[str, str] = {}
    stopped_shapes: set[tuple[object, ...]] = set()
    asked: set[str] = set()
    for request in sorted(snapshot.waiting, key=lambda r: (r.queued_at, r.id)):
        need = _need_of(request)
        shape = (request.label, request.policy, need, request.limit, request.container)
        candidates = _candidates(request, places, need, snapshot)
        fitting = [p for p in candidates if _covers(p.free(), need) and p.id not in paused]
        # Where it starts at once, if anywhere: not in a busy worker's pipeline while
        # another has a slot free, nor when a profile could bring a machine for it.
        could_bring = request.label is not None and any(
            request.label in p.labels
            and _covers(_profile_amounts(p), need)
            and _long_enough(p, request.limit, snapshot.walltime_margin_s)
            and _allows(p.containers, request)
            for p in profiles.values()
        )
        fitting = [p for p in fitting if p.runs_now()] or ([] if could_bring else fitting)
        if fitting:
            best, job_limit = _choose(request, fitting, snapshot)
            taken = best.known(need)
            gpu_ids = tuple(best.free_gpu_ids[: taken.gpus])
            best.used = best.used.plus(taken)
            del best.free_gpu_ids[: taken.gpus]
            placements.append(
                Placement(
                    request.id,
                    best.id,
                    gpu_ids,
                    best.threads_for(need),
                    cpus=taken.cpus,
                    gpus=taken.gpus,
                    ram_mb=taken.ram_mb,
                    job_limit=job_limit,
                    cached_bytes=best.cached_bytes(request.inputs),
                )
            )
            continue
        if shape in stopped_shapes:
            continue
        stopped_shapes.add(shape)
        smallest = _smallest_profile(request, need, profiles.values(), snapshot)
        if smallest is not None and smallest.can_grow and smallest.key not in asked:
            asks.append(ProvisionAsk(smallest.provisioner, smallest.name, request.id))
            asked.add(smallest.key)
        if any(_covers(p.capacity, need) for p in candidates):
            holdable = [p for p in candidates if _covers(p.unheld(), need)]
            previous = by_id.get(targets.get(request.id, ""))
            target = (
                previous
                if previous is not None and previous in holdable
                else min(holdable, key=lambda p: p.capacity_key(), default=None)
            )
            if target is not None:
                target.held = target.held.plus(target.known(need))
                holds[request.id] = target.id
            continue
    return Plan(tuple(placements), tuple(asks), holds)
