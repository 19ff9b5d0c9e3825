"""Which of the places that fit a request it goes to (rules 3, 4 and 6 of a pass).

In order: a place where it starts at once (not only a busy worker's pipeline); for a
request without a limit while some jobs end, the most time left (a place whose job never
ends has the most); then the most bytes of its inputs already in the place's cache;
then best fit (the index's order). The cache only chooses among places that fit: a
request never waits for a busy worker because of what that worker holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fluksio.scheduler.resources import Amounts, PlaceKey
from fluksio.scheduler.state import Group, Inputs, PlaceState

__all__ = ["choose"]


def choose(
    group: Group,
    places: dict[str, PlaceState],
    need: Amounts,
    in_time: Callable[[PlaceKey], bool],
    limit: float | None,
    *,
    pipelines: bool,
    ahead: bool,
    ending: bool,
    inputs: Inputs,
) -> str | None:
    """The place the request goes to, or None if none fits. ``pipelines``: some place
    takes calls ahead; ``ahead``: this request may be sent ahead (no profile could bring
    a machine for it: one that could is better asked for, and the request waits in the
    engine's queue, where a machine that frees or comes takes it); ``ending``: some
    place's job ends; ``inputs``: the request's input artifacts and their sizes, where
    some place caches any (else empty)."""
    if pipelines:

        def at_once(key: PlaceKey) -> bool:
            return places[key.place_id].runs_now() and in_time(key)

        found = _best(group, places, need, at_once, limit=limit, ending=ending, inputs=inputs)
        if found is not None or not ahead:
            return found
    return _best(group, places, need, in_time, limit=limit, ending=ending, inputs=inputs)


def _best(
    group: Group,
    places: dict[str, PlaceState],
    need: Amounts,
    accept: Callable[[PlaceKey], bool],
    *,
    limit: float | None,
    ending: bool,
    inputs: Inputs,
) -> str | None:
    def cached(key: PlaceKey) -> int:
        return places[key.place_id].cached_bytes(inputs)

    if limit is not None or not ending:
        if not inputs:
            return group.free.first(need, accept)
        return _first_most(group.free.covering(need, accept), cached)

    def lasts(key: PlaceKey) -> bool:
        return places[key.place_id].worker.ends_at is None and accept(key)

    lasting = (
        _first_most(group.free.covering(need, lasts), cached)
        if inputs
        else group.free.first(need, lasts)
    )
    if lasting is not None:
        return lasting

    def time_left_then_cached(key: PlaceKey) -> tuple[float, int]:
        return (places[key.place_id].worker.ends_at or 0.0, cached(key) if inputs else 0)

    return _first_most(group.free.covering(need, accept), time_left_then_cached)


def _first_most(keys: Iterable[PlaceKey], score: Callable[[PlaceKey], object]) -> str | None:
    """The first of ``keys`` (best fit first) with the highest ``score``."""
    chosen = max(keys, key=score, default=None)  # type: ignore[arg-type]
    return chosen.place_id if chosen is not None else None
