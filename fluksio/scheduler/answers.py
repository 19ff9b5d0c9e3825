"""The scheduler's answers to the engine's questions: why a request waits, what a place
has free, what runs where. A part of :class:`~.scheduler.Scheduler`, given its state."""

from __future__ import annotations

from fluksio.scheduler import reasons
from fluksio.scheduler.model import PlaceView, Resources, WaitKind, WaitReason, may_run
from fluksio.scheduler.resources import UNKNOWN, Amounts
from fluksio.scheduler.state import (
    Allocation,
    GroupKey,
    PlaceState,
    SchedulerState,
    need_of,
    shape_of,
)

__all__ = ["Answers"]


class Answers:
    """The questions the scheduler answers of its state; none changes it (but for the
    sentences it keeps until the next pass)."""

    def __init__(self, state: SchedulerState) -> None:
        self._state = state

    def reason(self, request_id: str, now: float | None = None) -> WaitReason | None:
        """Why a request waits (as of the last pass); None when it is running or unknown.

        A request waiting for provisioning says how its profile's request stands now (as
        last set by :meth:`set_profiles`); ``now`` is the time a rest is counted down from.
        """
        request = self._state.requests.get(request_id)
        if request is None or request_id in self._state.running:
            return None
        shape = shape_of(request)
        verdict = self._state.verdicts.get(shape)
        if verdict is None:
            return WaitReason(WaitKind.BUSY, "queued; the scheduler has not considered it yet")
        label, _policy, need, limit, container = shape
        is_holder = verdict.holder == request_id
        if verdict.kind is WaitKind.WALLTIME:
            places = [self._state.places[i] for i in self._candidates(verdict.group)]
            profiles = [p for p in self._state.profiles.values() if label in p.labels]
            return reasons.walltime(
                label,
                limit,
                places=places,
                profiles=profiles,
                now=self._state.now,
                margin=self._state.margin,
            )
        if container is not None and verdict.kind is WaitKind.NO_WORKER:
            return reasons.no_image(
                label,
                container,
                [self._state.places[i] for i in self._candidates(verdict.group)],
                [p for p in self._state.profiles.values() if label in p.labels],
            )
        profile = self._state.profiles.get(verdict.profile or "")
        if profile is not None and (
            verdict.kind is WaitKind.PROVISIONING or profile.provisioning.under_way
        ):
            told = reasons.provisioning(profile, now)
            if told is not None:
                return told
        cached = self._state.reason_cache.get((shape, is_holder))
        if cached is None:
            # The place held in the last pass may have gone since (until the next pass).
            held = (
                self._state.places.get(verdict.held_on) if is_holder and verdict.held_on else None
            )
            places = [self._state.places[i] for i in self._candidates(verdict.group)]
            cached = reasons.render(
                kind=verdict.kind,
                label=label,
                need=need,
                # Of a request in an image, the places that may run it (it waits for those).
                places=[p for p in places if may_run(p.worker.containers, container)],
                profiles=[p for p in self._state.profiles.values() if label in p.labels],
                held_on=held.worker.name if held is not None else None,
                profile=verdict.profile,
            )
            self._state.reason_cache[(shape, is_holder)] = cached
        return cached

    def _candidates(self, group_key: GroupKey) -> list[str]:
        group = self._state.groups.get(group_key)
        return sorted(group.members) if group is not None else []

    def explain(self, request_id: str, worker_id: str) -> str:
        """Why request ``request_id`` is not (or is) running on ``worker_id``, in a sentence."""
        request = self._state.requests[request_id]
        place = self._state.places[worker_id]
        return reasons.explain_place(request, need_of(request), place)

    def wanted_profiles(self) -> frozenset[str]:
        """The profiles (``provisioner/profile``) a waiting request would use, as of the last
        pass: one it waits on, or one whose request under way would give it room."""
        return frozenset(v.profile for v in self._state.verdicts.values() if v.profile is not None)

    def has_waiting(self) -> bool:
        return bool(self._state.queues)  # a shape's queue goes when its last request does

    def waiting(self) -> list[str]:
        """Ids of the waiting requests, in the order they will be served."""
        keys = [key for queue in self._state.queues.values() for key in queue]
        return [request_id for _queued_at, request_id in sorted(keys)]

    def running(self) -> dict[str, Allocation]:
        return dict(self._state.running)

    def allocation(self, request_id: str) -> Allocation | None:
        """What a running request took, or None when it is not running."""
        return self._state.running.get(request_id)

    def place_of(self, request_id: str) -> PlaceState | None:
        """The place a running request runs on; None when it is not running."""
        allocation = self._state.running.get(request_id)
        return None if allocation is None else self._state.places.get(allocation.place_id)

    def has_place(self, worker_id: str) -> bool:
        return worker_id in self._state.places

    def view(self, place_id: str) -> PlaceView | None:
        """What a place has and has free, read-only; None when it is not attached."""
        place = self._state.places.get(place_id)
        if place is None:
            return None
        worker = place.worker
        return PlaceView(
            worker.id,
            worker.name,
            worker.labels,
            _resources(place.capacity),
            _resources(place.free()),
            place.paused,
            len(place.cached),
            place.stopping,
        )

    def place(self, worker_id: str) -> PlaceState:
        return self._state.places[worker_id]

    def places(self) -> list[PlaceState]:
        return list(self._state.places.values())


def _resources(amounts: Amounts) -> Resources:
    def known(value: int) -> int | None:
        return None if value == UNKNOWN else value

    return Resources(known(amounts.gpus), known(amounts.cpus), known(amounts.ram_mb), amounts.slots)
