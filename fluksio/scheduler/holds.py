"""The scheduler's bookings, holds and index of free places: a placement taken on its
place, rule 4 of a pass (no starvation), and what keeps a place findable by what it has
free. A part of :class:`~.scheduler.Scheduler`, given its state."""

from __future__ import annotations

from collections.abc import Callable

from fluksio.scheduler.model import Placement
from fluksio.scheduler.resources import ZERO, Amounts, PlaceKey, covers
from fluksio.scheduler.state import Allocation, Group, GroupKey, PlaceState, SchedulerState

__all__ = ["Holds", "always"]


def always(_key: PlaceKey) -> bool:
    """The time filter of a request that any place could finish in time."""
    return True


class Holds:
    def __init__(self, state: SchedulerState) -> None:
        self._state = state

    def allocate(
        self, place_id: str, request_id: str, need: Amounts, limit: float | None
    ) -> Placement:
        """Place the request there: take what it needs (and GPUs by index), and say so; a
        request without a limit gets its job's end, less the margin, as one."""
        place = self._state.places[place_id]
        ends_at = place.worker.ends_at
        job_limit = None
        if limit is None and ends_at is not None and self._state.now is not None:
            job_limit = ends_at - self._state.now - self._state.margin
        taken = place.known(need)
        cached_bytes = place.cached_bytes(self._state.requests[request_id].inputs)
        gpu_ids: tuple[int, ...] = ()
        if taken.gpus:
            gpu_ids = tuple(place.free_gpu_ids[: taken.gpus])
            del place.free_gpu_ids[: taken.gpus]
        self.unindex_free(place)
        place.used = place.used.plus(taken)
        self.index_free(place)
        self._state.running[request_id] = Allocation(place_id, taken, gpu_ids)
        self._state.targets.pop(request_id, None)
        return Placement(
            request_id=request_id,
            worker_id=place_id,
            gpu_ids=gpu_ids,
            threads=place.threads_for(need),
            cpus=taken.cpus,
            gpus=taken.gpus,
            ram_mb=taken.ram_mb,
            job_limit=job_limit,
            cached_bytes=cached_bytes,
        )

    def take(self, request_id: str, allocation: Allocation) -> None:
        """Take ``allocation`` on its place for a request already known, as placed."""
        place = self._state.places[allocation.place_id]
        self.unindex_free(place)
        place.used = place.used.plus(allocation.taken)
        place.free_gpu_ids = [i for i in place.free_gpu_ids if i not in allocation.gpu_ids]
        self.index_free(place)
        self._state.running[request_id] = allocation

    def could_hold(
        self,
        group_key: GroupKey,
        group: Group,
        need: Amounts,
        in_time: Callable[[PlaceKey], bool],
    ) -> bool:
        if in_time is not always:
            return group.capacity.first(need, in_time) is not None
        key = (group_key, need)
        fits = self._state.capacity_fits.get(key)
        if fits is None:
            fits = self._state.capacity_fits[key] = group.capacity.first(need) is not None
        return fits

    def hold(
        self,
        request_id: str,
        group_key: GroupKey,
        group: Group,
        need: Amounts,
        in_time: Callable[[PlaceKey], bool],
    ) -> str | None:
        previous = self._state.places.get(self._state.targets.get(request_id, ""))
        if (
            previous is not None
            and group_key in previous.groups
            and covers(previous.unheld(), need)
            and in_time(previous.capacity_key())
            and not previous.stopping
        ):
            target: str | None = previous.id
        else:
            places = self._state.places
            # Never held on a place that is stopping: it takes nothing again.
            target = group.capacity.first(
                need,
                lambda key: (
                    in_time(key)
                    and not places[key.place_id].stopping
                    and covers(places[key.place_id].unheld(), need)
                ),
            )
        if target is None:
            return None
        place = self._state.places[target]
        self.unindex_free(place)
        place.held = place.held.plus(place.known(need))
        self.index_free(place)
        self._state.held.add(target)
        self._state.targets[request_id] = target
        return target

    def release(self) -> None:
        for place_id in self._state.held:
            place = self._state.places[place_id]
            self.unindex_free(place)
            place.held = ZERO
            self.index_free(place)
        self._state.held = set()

    def index_free(self, place: PlaceState) -> None:
        key = place.free_key()
        if key.slots > 0 and not place.paused:
            for group_key in place.groups:
                self._state.groups[group_key].free.add(key)
            place.indexed = key
        else:
            place.indexed = None

    def unindex_free(self, place: PlaceState) -> None:
        # The key it was indexed under, remembered: not computed again from its amounts.
        key = place.indexed
        if key is not None:
            for group_key in place.groups:
                self._state.groups[group_key].free.discard(key)
            place.indexed = None
