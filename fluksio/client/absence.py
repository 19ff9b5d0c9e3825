"""A waiting client across the engine's absence (a restart, an upgrade): how long it
carries on, when it asks again, and where a reader of the live feed goes on from.

Pure: the callers (:class:`~fluksio.client.client.Client` and its async twin) give the
time and do the waiting.
"""

from __future__ import annotations

import os

from fluksio.client.errors import ClientError, EngineRefused, Unreachable
from fluksio.client.sse import ReceivedEvent

__all__ = ["RIDE_OVER_S", "Absence", "FeedPosition", "is_absence", "ride_over_from_environment"]

FEED_RECONNECT_S = 1.0
"""The pause between two openings of the feed when a count of them is asked for."""
RIDE_OVER_S = 120.0
"""How long a waiting client (``wait_run``, the feed, an executor's futures, ``--follow``)
carries on while the engine cannot be reached: a restart, an upgrade."""
MOST_RIDE_OVER_S = 7 * 24 * 3600.0
_AGAIN_FIRST_S, _AGAIN_MOST_S = 0.25, 5.0
_ABSENT_STATUSES = frozenset({502, 503, 504})
"""What a proxy in front of the engine answers while the engine is down."""


def is_absence(error: ClientError) -> bool:
    """The engine is away (unreachable, or its proxy says it is down): asking again later
    may succeed. Anything else (a refusal, an answer this client cannot read) would only
    be the same again."""
    if isinstance(error, EngineRefused):
        return error.status in _ABSENT_STATUSES
    return isinstance(error, Unreachable)


class Absence:
    """How long the engine has been away from a waiting client, and when to ask again:
    a quarter second, doubling to five, for at most ``ride_over_s`` in all; then one
    sentence. Pure: the caller gives the time and does the waiting."""

    def __init__(self, ride_over_s: float) -> None:
        self.ride_over_s = ride_over_s
        self._since: float | None = None
        self._pause = _AGAIN_FIRST_S

    def back(self) -> None:
        """The engine answered."""
        self._since, self._pause = None, _AGAIN_FIRST_S

    def lost(self, why: ClientError, now: float, *, unsent_only: bool = False) -> float:
        """``why`` happened at ``now``: the pause before asking again; ``why`` itself when
        it is not an absence (with ``unsent_only``: not one that kept the request from
        reaching any engine), and one sentence once the absence has lasted too long."""
        unsent = isinstance(why, Unreachable) and why.unsent
        if not is_absence(why) or (unsent_only and not unsent):
            raise why
        if self._since is None:
            self._since = now
        away = now - self._since
        if away >= self.ride_over_s:
            raise Unreachable(
                f"{why}; the engine has not answered for {away:.0f} s, the most this client"
                f" waits for it to come back (ride_over_s={self.ride_over_s:g})"
            )
        pause, self._pause = self._pause, min(self._pause * 2, _AGAIN_MOST_S)
        return min(pause, self._since + self.ride_over_s - now)


def ride_over_from_environment() -> float:
    """``$FLUKSIO_RIDE_OVER_S``: how long what waits rides over the engine's absence
    (default :data:`RIDE_OVER_S`)."""
    given = os.environ.get("FLUKSIO_RIDE_OVER_S")
    if not given:
        return RIDE_OVER_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MOST_RIDE_OVER_S:
        raise ClientError(
            f"FLUKSIO_RIDE_OVER_S must be a number of seconds from 0 to {MOST_RIDE_OVER_S:g},"
            f" not {given!r}"
        )
    return seconds


class FeedPosition:
    """Where a reader of the live feed is, so that a feed opened again goes on from the
    last event seen, and when it gives up: after ``reconnects`` failures in a row, or
    (None) once the engine has been away longer than its :class:`Absence` allows."""

    def __init__(
        self, run: str | None, last_id: str | None, reconnects: int | None, absence: Absence
    ) -> None:
        self.path = "/events" + (f"?run={run}" if run else "")
        self.last_id = last_id
        self._reconnects = reconnects
        self._absence = absence
        self._failures = 0

    def seen(self, event: ReceivedEvent) -> None:
        self._failures = 0
        self._absence.back()
        if event.id:
            self.last_id = event.id

    def dropped(self, why: ClientError, now: float) -> float:
        """The feed broke off (or the engine ended it): the pause before opening it again;
        ``why`` (or a sentence) is raised once it has done so too often or too long."""
        self._failures += 1
        if self._reconnects is not None:
            if self._failures > self._reconnects:
                raise why
            return FEED_RECONNECT_S
        # A feed the engine ended, or cut, is one it may open again once it is back.
        return self._absence.lost(why if is_absence(why) else Unreachable(str(why)), now)
