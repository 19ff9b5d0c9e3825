"""Which of the places that fit a request it goes to (rules 3, 4 and 6 of a pass), as a
declared ranking: filters, then criteria in order.

The filters: the place covers what the request needs (the group's index); its job lets
the request finish in time (``in_time``); and where the request may not be sent ahead (a
profile could bring a machine for it, which is better asked for), it starts there at
once. Then :data:`RANKING`: the first criterion that applies decides, the next breaks its
ties, and best fit (the index's order) breaks the last. A new criterion is one
:class:`Criterion` in the list, and the same line in the reference
(:mod:`~fluksio.scheduler.reference`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from fluksio.scheduler.resources import Amounts, PlaceKey
from fluksio.scheduler.state import Group, Inputs, PlaceState

__all__ = ["RANKING", "Criterion", "Kind", "Situation", "choose"]


class Kind(NamedTuple):
    """The yes-or-no facts that say which criteria apply: few, so which apply is worked
    out once per kind (a pass asks for every request it places)."""

    no_limit: bool
    """The request sets no limit."""
    inputs: bool
    """It has inputs some place caches."""
    pipelines: bool
    """Some place takes calls ahead of its free slots."""
    ending: bool
    """Some place's job ends."""
    image: bool
    """It runs in a container, and some place holds images ready."""


class Situation(NamedTuple):
    """What the scores look at besides the place: the request's limit and inputs, and
    the :class:`Kind` of the choice."""

    limit: float | None
    inputs: Inputs
    """The request's input artifacts and their sizes, where some place caches any."""
    image: str | None
    """The image it runs in, where some place holds any ready."""
    kind: Kind


@dataclass(frozen=True)
class Criterion:
    """One rule of the ranking: where it ``applies``, the place with the highest
    ``score`` wins (``True`` over ``False``)."""

    name: str
    applies: Callable[[Kind], bool]
    score: Callable[[PlaceState, Situation], float | bool]
    yes_or_no: bool = False
    """Scored ``True`` or ``False``: the places that have it are ranked first, by the
    rest, found as the index's first match instead of every place scored."""


def _time_left(place: PlaceState, _situation: Situation) -> float:
    ends_at = place.worker.ends_at
    return math.inf if ends_at is None else ends_at


RANKING: tuple[Criterion, ...] = (
    # Not a busy worker's pipeline while another place has a slot free.
    Criterion("starts now", lambda k: k.pipelines, lambda p, _s: p.runs_now(), yes_or_no=True),
    # A call without a limit runs until its job's end: the most time left (none: most).
    Criterion("time left", lambda k: k.no_limit and k.ending, _time_left),
    # A worker holding its image ready: no pull (often gigabytes) before it starts.
    Criterion("holds the image", lambda k: k.image, lambda p, s: s.image in p.images, True),
    # Among the places that fit only: a call never waits for what a busy worker holds.
    Criterion("cached bytes", lambda k: k.inputs, lambda p, s: p.cached_bytes(s.inputs)),
)
"""The criteria, most important first; best fit breaks the last tie."""


@functools.cache
def _applying(facts: tuple[bool, bool, bool, bool, bool]) -> tuple[Criterion, ...]:
    kind = Kind(*facts)
    return tuple(criterion for criterion in RANKING if criterion.applies(kind))


def choose(
    group: Group,
    places: dict[str, PlaceState],
    need: Amounts,
    in_time: Callable[[PlaceKey], bool],
    *,
    limit: float | None,
    inputs: Inputs,
    image: str | None,
    pipelines: bool,
    ending: bool,
    ahead: bool,
) -> str | None:
    """The place the request goes to, or None if none passes the filters. ``pipelines``:
    some place takes calls ahead; ``ending``: some place's job ends; ``ahead``: the
    request may be sent ahead (no profile could bring a machine for it). Its
    :class:`Kind` is a plain tuple here (the pass makes one per request placed), and a
    :class:`Situation` is made only where a criterion applies."""
    facts = (limit is None, bool(inputs), pipelines, ending, image is not None)
    if ahead or not pipelines:
        admitted = in_time
    else:

        def admitted(key: PlaceKey) -> bool:
            return in_time(key) and places[key.place_id].runs_now()

    ranking = _applying(facts)
    if not ranking:
        return group.free.first(need, admitted)  # best fit: the index's first
    situation = Situation(limit, inputs, image, Kind(*facts))
    return _ranked(group, places, need, admitted, ranking=ranking, situation=situation)


def _ranked(
    group: Group,
    places: dict[str, PlaceState],
    need: Amounts,
    admitted: Callable[[PlaceKey], bool],
    *,
    ranking: tuple[Criterion, ...],
    situation: Situation,
) -> str | None:
    if not ranking:
        return group.free.first(need, admitted)  # best fit: the index's first
    head, rest = ranking[0], ranking[1:]
    if head.yes_or_no:

        def has_it(key: PlaceKey) -> bool:
            return admitted(key) and bool(head.score(places[key.place_id], situation))

        found = _ranked(group, places, need, has_it, ranking=rest, situation=situation)
        return found or _ranked(group, places, need, admitted, ranking=rest, situation=situation)

    def score(key: PlaceKey) -> tuple[float | bool, ...]:
        place = places[key.place_id]
        return tuple(criterion.score(place, situation) for criterion in ranking)

    return _first_most(group.free.covering(need, admitted), score)


def _first_most(keys: Iterable[PlaceKey], score: Callable[[PlaceKey], object]) -> str | None:
    """The first of ``keys`` (best fit first) with the highest ``score``."""
    chosen = max(keys, key=score, default=None)  # type: ignore[arg-type]
    return chosen.place_id if chosen is not None else None
