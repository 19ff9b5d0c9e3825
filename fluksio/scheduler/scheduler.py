"""The incremental scheduler: events in, a plan per pass, a reason for every wait.

Rules of a pass, the contract the property tests hold it to, are docs/scheduler.md's
(order, where, fit and best fit, no starvation, provisioning, walltime, thread caps):
first come first served by ``(queued_at, id)``; a label's calls on workers carrying it
(``prefer``: the engine when none could ever hold it); which fitting place wins is
:mod:`~.choose`'s; the first request of each *shape* that cannot be placed *holds* what
it needs where it could run once running calls end (conservative backfill); a profile
that could bring a machine for it is asked for (:class:`~.model.Provisioning` says which
may grow; the scheduler never changes it); a place whose job ends takes only what fits
in its time left with ``walltime_margin_s`` to spare.

A shape that cannot be placed or hold is done for the pass: within a pass places only
fill up, so nothing later of that shape could fit either. A pass therefore costs
``O((placements + shapes) * log)``, however many requests wait behind.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from fluksio.scheduler.answers import Answers
from fluksio.scheduler.choose import choose
from fluksio.scheduler.holds import Holds, always
from fluksio.scheduler.model import (
    ENGINE_ID,
    CallRequest,
    Placement,
    Policy,
    Profile,
    ProvisionAsk,
    Worker,
)
from fluksio.scheduler.plan import DEFAULT_WALLTIME_MARGIN_S, Plan, Snapshot
from fluksio.scheduler.profiles import fitting_profile
from fluksio.scheduler.queues import ShapeQueue
from fluksio.scheduler.resources import Amounts, PlaceKey
from fluksio.scheduler.state import (
    Allocation,
    Group,
    GroupKey,
    PlaceState,
    SchedulerState,
    Shape,
    need_of,
    shape_of,
)
from fluksio.scheduler.verdicts import Verdicts

__all__ = [
    "DEFAULT_WALLTIME_MARGIN_S",
    "Plan",
    "Scheduler",
    "Shape",
    "Snapshot",
    "plan",
]


Fit = Callable[[PlaceKey], bool]


class Scheduler:
    """Holds places, queue and allocations; :meth:`schedule` runs one pass.

    Pure: no I/O, no clock, no threads. Every method is an event the engine reports or a
    question it asks; the engine calls :meth:`schedule` after the events of a moment. A
    shell over one :class:`~.state.SchedulerState`: its bookings and holds are its part
    :class:`~.holds.Holds`, why a shape it cannot place waits :class:`~.verdicts.Verdicts`,
    the questions it answers :class:`~.answers.Answers`.
    """

    def __init__(
        self,
        engine: Worker | None = None,
        profiles: Iterable[Profile] = (),
        *,
        walltime_margin_s: float = DEFAULT_WALLTIME_MARGIN_S,
    ) -> None:
        self._state = SchedulerState(walltime_margin_s, {p.key: p for p in profiles})
        self._holds = Holds(self._state)
        self._verdicts = Verdicts(self._state, self._holds)
        self._answers = answers = Answers(self._state)
        # What is asked of it, answered by its part.
        self.reason, self.explain = answers.reason, answers.explain
        self.wanted_profiles, self.has_waiting = answers.wanted_profiles, answers.has_waiting
        self.waiting, self.running, self.allocation = (
            answers.waiting, answers.running, answers.allocation
        )  # fmt: skip
        self.has_place, self.view = answers.has_place, answers.view
        self.place, self.places = answers.place, answers.places
        if engine is not None:
            self.add_worker(engine)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot) -> Scheduler:
        scheduler = cls(profiles=snapshot.profiles, walltime_margin_s=snapshot.walltime_margin_s)
        scheduler._state.now = snapshot.now
        for worker in snapshot.places:
            scheduler.add_worker(worker)
        for request, allocation in snapshot.running:
            scheduler._state.requests[request.id] = request
            scheduler._holds.take(request.id, allocation)
        for request in snapshot.waiting:
            scheduler.submit(request)
        scheduler._state.targets = dict(snapshot.targets)
        for place_id in snapshot.paused:
            scheduler.set_paused(place_id, True)
        for place_id, digests in snapshot.cached:
            scheduler.set_cached(place_id, digests)
        for place_id, images in snapshot.images:
            scheduler.set_cached(place_id, scheduler._state.places[place_id].cached, images)
        return scheduler

    def snapshot(self) -> Snapshot:
        return Snapshot(
            places=tuple(place.worker for place in self._state.places.values()),
            running=tuple((self._state.requests[r], a) for r, a in self._state.running.items()),
            waiting=tuple(self._state.requests[r] for r in self.waiting()),
            profiles=tuple(self._state.profiles.values()),
            targets=tuple(sorted(self._state.targets.items())),
            paused=tuple(sorted(p.id for p in self._state.places.values() if p.paused)),
            now=self._state.now,
            walltime_margin_s=self._state.margin,
            cached=tuple(sorted((p.id, p.cached) for p in self._state.places.values() if p.cached)),
            images=tuple(sorted((p.id, p.images) for p in self._state.places.values() if p.images)),
        )

    # -- events ------------------------------------------------------------------------

    def add_worker(self, worker: Worker) -> None:
        if worker.id in self._state.places:
            raise ValueError(f"place {worker.id!r} is already attached")
        place = PlaceState(worker)
        self._state.places[worker.id] = place
        self._state.capacity_fits.clear()
        if worker.ends_at is not None:
            self._state.ending += 1
        if worker.pipeline:
            self._state.pipelines += 1
        for key in place.groups:
            group = self._state.groups.setdefault(key, Group())
            group.members.add(place.id)
            group.capacity.add(place.capacity_key())
        self._holds.index_free(place)

    def remove_worker(self, worker_id: str) -> tuple[str, ...]:
        """Forget a place; returns the ids of the requests that were running on it."""
        place = self._state.places.pop(worker_id)
        self._state.capacity_fits.clear()
        if place.worker.ends_at is not None:
            self._state.ending -= 1
        if place.worker.pipeline:
            self._state.pipelines -= 1
        if place.cached:
            self._state.caching -= 1
        if place.images:
            self._state.imaging -= 1
        self._holds.unindex_free(place)
        for key in place.groups:
            group = self._state.groups[key]
            group.members.discard(worker_id)
            group.capacity.discard(place.capacity_key())
            if not group.members:
                del self._state.groups[key]
        self._state.held.discard(worker_id)
        lost = tuple(rid for rid, a in self._state.running.items() if a.place_id == worker_id)
        for request_id in lost:
            del self._state.running[request_id]
            del self._state.requests[request_id]
        self._state.targets = {r: p for r, p in self._state.targets.items() if p != worker_id}
        return lost

    def set_cached(
        self, place_id: str, digests: frozenset[str], images: frozenset[str] = frozenset()
    ) -> None:
        """What a place's cache holds now, as it reports it: artifact digests, and the
        container images it holds ready."""
        place = self._state.places[place_id]
        self._state.caching += bool(digests) - bool(place.cached)
        self._state.imaging += bool(images) - bool(place.images)
        place.cached, place.images = digests, images

    def saved_by(self, request_id: str, digest: str) -> str | None:
        """A running request saved ``digest``: its place holds it now (a worker caches what
        its calls save). That place; None: it runs nowhere, or the place held it."""
        place = self._answers.place_of(request_id)
        if place is None or place.id == ENGINE_ID or digest in place.cached:
            return None
        self.set_cached(place.id, place.cached | {digest}, place.images)
        return place.id

    def set_paused(self, place_id: str, paused: bool) -> None:
        """A place stopped answering (or answers again): while paused it keeps what runs
        there and is given nothing new, so new calls go to places that answer."""
        place = self._state.places[place_id]
        paused = paused or place.stopping
        if place.paused == paused:
            return
        self._holds.unindex_free(place)
        place.paused = paused
        self._holds.index_free(place)

    def set_stopping(self, place_id: str) -> None:
        """A place's worker is stopping (told to stop): what runs there finishes or is
        stopped by it, and nothing new goes there again, answering or not."""
        place = self._state.places[place_id]
        place.stopping = True
        self.set_paused(place_id, True)

    def submit(self, request: CallRequest) -> None:
        if request.id in self._state.requests:
            raise ValueError(f"request {request.id!r} is already known")
        self._state.requests[request.id] = request
        self._state.queues.setdefault(shape_of(request), ShapeQueue()).push(
            (request.queued_at, request.id)
        )

    def withdraw(self, request_id: str) -> bool:
        """Take a waiting request out of the queue (cancelled); False if it is not waiting."""
        request = self._state.requests.get(request_id)
        if request is None or request_id in self._state.running:
            return False
        shape = shape_of(request)
        self._state.queues[shape].remove((request.queued_at, request_id))
        if not self._state.queues[shape]:
            del self._state.queues[shape]
        del self._state.requests[request_id]
        self._state.targets.pop(request_id, None)
        return True

    def adopt(self, request: CallRequest, place_id: str, gpu_ids: tuple[int, ...] = ()) -> None:
        """A call already running at ``place_id`` (a restarted engine found it there): it
        holds what it asks for there, and the GPUs it was given, until :meth:`finish`."""
        if request.id in self._state.requests:
            raise ValueError(f"request {request.id!r} is already known")
        place = self._state.places[place_id]
        self._state.requests[request.id] = request
        self._holds.take(request.id, Allocation(place_id, place.known(need_of(request)), gpu_ids))

    def finish(self, request_id: str) -> Allocation:
        """A placed call ended: give back exactly what it took."""
        allocation = self._state.running.pop(request_id)
        del self._state.requests[request_id]
        place = self._state.places.get(allocation.place_id)
        if place is not None:
            self._holds.unindex_free(place)
            place.used = place.used.minus(allocation.taken)
            place.free_gpu_ids = sorted((*place.free_gpu_ids, *allocation.gpu_ids))
            self._holds.index_free(place)
        return allocation

    def set_profiles(self, profiles: Iterable[Profile]) -> None:
        """Replace what provisioners could add, and how each one's provisioning stands."""
        self._state.profiles = {p.key: p for p in profiles}

    def profiles(self) -> tuple[Profile, ...]:
        return tuple(self._state.profiles.values())

    # -- the pass ----------------------------------------------------------------------

    def schedule(self, now: float | None = None) -> Plan:
        """One pass at time ``now`` (needed only where a place's job ends; without it such
        a place takes nothing)."""
        state = self._state
        state.now = now
        self._holds.release()
        state.verdicts = {}
        state.reason_cache = {}
        placements: list[Placement] = []
        asks: dict[str, ProvisionAsk] = {}
        holds: dict[str, str] = {}
        heap = [(queue.head(), n, shape) for n, (shape, queue) in enumerate(state.queues.items())]
        heapq.heapify(heap)
        # Within a pass a shape's group and time filter stay what they were: found once.
        where: dict[Shape, tuple[Callable[[PlaceKey], bool], GroupKey, Group | None]] = {}
        item = heapq.heappop(heap) if heap else None
        while item is not None:
            (_queued_at, request_id), n, shape = item
            need = shape[2]
            found = where.get(shape)
            if found is None:
                label, policy, _need, limit, container = shape
                in_time = self._verdicts.admits(limit, container)
                group_key = self._group_for(label, policy, need, in_time)
                found = where[shape] = (in_time, group_key, state.groups.get(group_key))
            in_time, group_key, group = found
            limit = shape[3]
            place_id = (
                None if group is None else self._choose(group, request_id, need, in_time, limit)
            )
            if place_id is None:
                verdict = self._verdicts.blocked(
                    shape, group_key, group, in_time, request_id=request_id, asks=asks
                )
                state.verdicts[shape] = verdict
                if verdict.held_on is not None:
                    holds[request_id] = verdict.held_on
                item = heapq.heappop(heap) if heap else None
                continue
            placements.append(self._holds.allocate(place_id, request_id, need, limit))
            queue = state.queues[shape]
            queue.pop_head()
            if queue:
                # Its next request, unless another shape's head comes first: one heap step.
                item = heapq.heappushpop(heap, (queue.head(), n, shape))
            else:
                del state.queues[shape]
                item = heapq.heappop(heap) if heap else None
        return Plan(tuple(placements), tuple(asks.values()), holds)

    def _group_for(
        self,
        label: str | None,
        policy: Policy,
        need: Amounts,
        in_time: Callable[[PlaceKey], bool] = always,
    ) -> GroupKey:
        if label is None:
            return None
        if policy is Policy.PREFER:
            group = self._state.groups.get(label)
            if group is None or group.capacity.first(need, in_time) is None:
                return None
        return label

    def _choose(
        self, group: Group, request_id: str, need: Amounts, in_time: Fit, limit: float | None
    ) -> str | None:
        request = self._state.requests[request_id]
        profiles, container = self._state.profiles.values(), request.container
        ahead = self._state.pipelines > 0 and not fitting_profile(
            profiles, request.label, need, limit, self._state.margin, container=container
        )
        return choose(
            group, self._state.places, need, in_time, limit=limit, ahead=ahead,
            inputs=request.inputs if self._state.caching else (),
            image=container.image if container is not None and self._state.imaging else None,
            pipelines=self._state.pipelines > 0, ending=self._state.ending > 0,
        )  # fmt: skip


def plan(snapshot: Snapshot) -> Plan:
    """One pass as a pure function: the plan a scheduler in ``snapshot``'s state would make."""
    return Scheduler.from_snapshot(snapshot).schedule(snapshot.now)
