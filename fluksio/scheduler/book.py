"""The scheduler's book: what it holds, and its answers to the engine's questions (why a
request waits, what a place has free). :class:`~.scheduler.Scheduler` adds the events
and the pass."""

from __future__ import annotations

from typing import NamedTuple

from fluksio.scheduler import reasons
from fluksio.scheduler.model import (
    CallRequest,
    Container,
    PlaceView,
    Policy,
    Profile,
    Resources,
    WaitKind,
    WaitReason,
    may_run,
)
from fluksio.scheduler.queues import ShapeQueue
from fluksio.scheduler.resources import UNKNOWN, Amounts
from fluksio.scheduler.state import Allocation, Group, GroupKey, PlaceState, need_of

__all__ = ["Book", "Shape", "Verdict", "shape_of"]

Shape = tuple[str | None, Policy, Amounts, float | None, Container | None]
"""Requests alike in label, policy, amounts, limit and container: they are served strictly
in order."""


class Verdict(NamedTuple):
    """Why a shape stopped in the last pass; rendered into text only when asked (one is
    made per waiting shape per pass: a NamedTuple, cheap to make)."""

    kind: WaitKind
    group: GroupKey
    holder: str | None = None
    held_on: str | None = None
    profile: str | None = None


def shape_of(request: CallRequest) -> Shape:
    return (request.label, request.policy, need_of(request), request.limit, request.container)


class Book:
    """What the scheduler holds, and the questions it answers (no event changes it here)."""

    _margin: float
    _now: float | None
    _places: dict[str, PlaceState]
    _groups: dict[GroupKey, Group]
    _queues: dict[Shape, ShapeQueue]
    _requests: dict[str, CallRequest]
    _running: dict[str, Allocation]
    _profiles: dict[str, Profile]
    _verdicts: dict[Shape, Verdict]
    _reason_cache: dict[tuple[Shape, bool], WaitReason]

    def reason(self, request_id: str, now: float | None = None) -> WaitReason | None:
        """Why a request waits (as of the last pass); None when it is running or unknown.

        A request waiting for provisioning says how its profile's request stands now (as
        last set by :meth:`set_profiles`); ``now`` is the time a rest is counted down from.
        """
        request = self._requests.get(request_id)
        if request is None or request_id in self._running:
            return None
        shape = shape_of(request)
        verdict = self._verdicts.get(shape)
        if verdict is None:
            return WaitReason(WaitKind.BUSY, "queued; the scheduler has not considered it yet")
        label, _policy, need, limit, container = shape
        is_holder = verdict.holder == request_id
        if verdict.kind is WaitKind.WALLTIME:
            places = [self._places[i] for i in self._candidates(verdict.group)]
            profiles = [p for p in self._profiles.values() if label in p.labels]
            return reasons.walltime(
                label, limit, places=places, profiles=profiles, now=self._now, margin=self._margin
            )
        if container is not None and verdict.kind is WaitKind.NO_WORKER:
            return reasons.no_image(
                label,
                container,
                [self._places[i] for i in self._candidates(verdict.group)],
                [p for p in self._profiles.values() if label in p.labels],
            )
        profile = self._profiles.get(verdict.profile or "")
        if profile is not None and (
            verdict.kind is WaitKind.PROVISIONING or profile.provisioning.under_way
        ):
            told = reasons.provisioning(profile, now)
            if told is not None:
                return told
        cached = self._reason_cache.get((shape, is_holder))
        if cached is None:
            # The place held in the last pass may have gone since (until the next pass).
            held = self._places.get(verdict.held_on) if is_holder and verdict.held_on else None
            places = [self._places[i] for i in self._candidates(verdict.group)]
            cached = reasons.render(
                kind=verdict.kind,
                label=label,
                need=need,
                # Of a request in an image, the places that may run it (it waits for those).
                places=[p for p in places if may_run(p.worker.containers, container)],
                profiles=[p for p in self._profiles.values() if label in p.labels],
                held_on=held.worker.name if held is not None else None,
                profile=verdict.profile,
            )
            self._reason_cache[(shape, is_holder)] = cached
        return cached

    def _candidates(self, group_key: GroupKey) -> list[str]:
        group = self._groups.get(group_key)
        return sorted(group.members) if group is not None else []

    def explain(self, request_id: str, worker_id: str) -> str:
        """Why request ``request_id`` is not (or is) running on ``worker_id``, in a sentence."""
        request = self._requests[request_id]
        place = self._places[worker_id]
        return reasons.explain_place(request, need_of(request), place)

    def wanted_profiles(self) -> frozenset[str]:
        """The profiles (``provisioner/profile``) a waiting request would use, as of the last
        pass: one it waits on, or one whose request under way would give it room."""
        return frozenset(v.profile for v in self._verdicts.values() if v.profile is not None)

    def has_waiting(self) -> bool:
        return bool(self._queues)  # a shape's queue goes when its last request does

    def waiting(self) -> list[str]:
        """Ids of the waiting requests, in the order they will be served."""
        keys = [key for queue in self._queues.values() for key in queue]
        return [request_id for _queued_at, request_id in sorted(keys)]

    def running(self) -> dict[str, Allocation]:
        return dict(self._running)

    def allocation(self, request_id: str) -> Allocation | None:
        """What a running request took, or None when it is not running."""
        return self._running.get(request_id)

    def _place_of(self, request_id: str) -> PlaceState | None:
        """The place a running request runs on; None when it is not running."""
        allocation = self._running.get(request_id)
        return None if allocation is None else self._places.get(allocation.place_id)

    def has_place(self, worker_id: str) -> bool:
        return worker_id in self._places

    def view(self, place_id: str) -> PlaceView | None:
        """What a place has and has free, read-only; None when it is not attached."""
        place = self._places.get(place_id)
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
        return self._places[worker_id]

    def places(self) -> list[PlaceState]:
        return list(self._places.values())


def _resources(amounts: Amounts) -> Resources:
    def known(value: int) -> int | None:
        return None if value == UNKNOWN else value

    return Resources(known(amounts.gpus), known(amounts.cpus), known(amounts.ram_mb), amounts.slots)
