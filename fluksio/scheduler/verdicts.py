"""Why a shape that cannot be placed waits, found in a pass: held on a place that will
have room, a profile asked for, too short a time before the jobs end, no image allowed,
too large for anything; and which places a request could finish on in time. A part of
:class:`~.scheduler.Scheduler`, given its state and its holds."""

from __future__ import annotations

from collections.abc import Callable

from fluksio.scheduler.holds import Holds, always
from fluksio.scheduler.model import Container, ProvisionAsk, WaitKind, Worker, may_run
from fluksio.scheduler.profiles import fitting_profile
from fluksio.scheduler.resources import PlaceKey
from fluksio.scheduler.state import Group, GroupKey, SchedulerState, Shape, Verdict

__all__ = ["Verdicts"]


class Verdicts:
    def __init__(self, state: SchedulerState, holds: Holds) -> None:
        self._state = state
        self._holds = holds

    def admits(
        self, limit: float | None, container: Container | None
    ) -> Callable[[PlaceKey], bool]:
        """Which places a request of ``limit`` could finish on before their job ends, and
        may run its ``container``."""
        places = self._state.places
        if container is not None:
            in_time = self.admits(limit, None)
            return lambda key: (
                may_run(places[key.place_id].worker.containers, container) and in_time(key)
            )
        if not self._state.ending:
            return always

        def fits(key: PlaceKey) -> bool:
            return self._fits(places[key.place_id].worker, limit)

        return fits

    def _fits(self, worker: Worker, limit: float | None) -> bool:
        if (ends_at := worker.ends_at) is None:
            return True
        if self._state.now is None:
            return False
        if limit is None:
            return self._state.now + self._state.margin + worker.notice_s < ends_at
        return self._state.now + limit + self._state.margin <= ends_at

    def blocked(
        self,
        shape: Shape,
        group_key: GroupKey,
        group: Group | None,
        in_time: Callable[[PlaceKey], bool],
        *,
        request_id: str,
        asks: dict[str, ProvisionAsk],
    ) -> Verdict:
        label, _policy, need, limit, container = shape
        profile = fitting_profile(
            self._state.profiles.values(),
            label,
            need,
            limit,
            self._state.margin,
            container=container,
        )
        if profile is not None and profile.can_grow and profile.key not in asks:
            asks[profile.key] = ProvisionAsk(profile.provisioner, profile.name, request_id)
        if group is not None and self._holds.could_hold(group_key, group, need, in_time):
            held_on = self._holds.hold(request_id, group_key, group, need, in_time)
            # Busy: a request of the profile under way will add room, and it says so.
            growing = profile is not None and (
                profile.key in asks or profile.provisioning.under_way
            )
            key = profile.key if growing and profile is not None else None
            return Verdict(WaitKind.BUSY, group_key, request_id, held_on, profile=key)
        if profile is None:
            if container is not None and not self._offered(group, label, container):
                return Verdict(WaitKind.NO_WORKER, group_key)
            admitted = self.admits(None, container)
            if (group is not None and group.capacity.first(need, admitted)) or (
                fitting_profile(
                    self._state.profiles.values(),
                    label,
                    need,
                    limit,
                    self._state.margin,
                    by_time=False,
                    container=container,
                )
                is not None
            ):
                # The resources exist; only the time is short.
                return Verdict(WaitKind.WALLTIME, group_key)
            no_one = label is not None and label not in self._state.groups
            offered = any(label in p.labels for p in self._state.profiles.values())
            kind = WaitKind.NO_WORKER if no_one and not offered else WaitKind.TOO_LARGE
            return Verdict(kind, group_key)
        return Verdict(WaitKind.PROVISIONING, group_key, profile=profile.key)

    def _offered(self, group: Group | None, label: str | None, container: Container) -> bool:
        """Whether a place of the group, or a profile carrying the label, may run
        ``container``."""
        places = () if group is None else (self._state.places[i].worker for i in group.members)
        profiles = (p for p in self._state.profiles.values() if label in p.labels)
        return any(may_run(p.containers, container) for p in (*places, *profiles))
