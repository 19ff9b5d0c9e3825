"""How long a waiting client asks again for an absent engine, and when it gives up: the
pure policy under ``wait_run``, the feed and an executor's futures (issue 50, part 3)."""

from __future__ import annotations

import pytest

from fluksio.client.absence import Absence, is_absence
from fluksio.client.errors import ClientError, EngineRefused, Unreachable

REFUSED = Unreachable("cannot reach the engine at http://127.0.0.1:1: Connection refused")


def test_the_pauses_double_to_five_seconds_and_the_absence_ends_in_one_sentence() -> None:
    absence = Absence(ride_over_s=30)
    pauses, now = [], 100.0
    with pytest.raises(Unreachable) as gave_up:
        while True:
            pause = absence.lost(REFUSED, now)
            pauses.append(pause)
            now += pause
    assert pauses[:6] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0]
    assert sum(pauses) == pytest.approx(30)
    assert str(gave_up.value) == (
        f"{REFUSED}; the engine has not answered for 30 s, the most this client waits for"
        " it to come back (ride_over_s=30)"
    )


def test_an_answer_between_two_absences_starts_the_count_again() -> None:
    absence = Absence(ride_over_s=10)
    absence.lost(REFUSED, 0.0)
    absence.lost(REFUSED, 8.0)
    absence.back()
    assert absence.lost(REFUSED, 50.0) == 0.25, "a fresh absence, not 50 s of one"


def test_a_refusal_or_an_unreadable_answer_is_raised_at_once() -> None:
    absence = Absence(ride_over_s=60)
    refused = EngineRefused(404, "no run with id 'r1'")
    with pytest.raises(EngineRefused):
        absence.lost(refused, 0.0)
    with pytest.raises(ClientError, match="not JSON"):
        absence.lost(ClientError("the engine's answer to GET /runs is not JSON"), 0.0)
    # A proxy in front of the engine says it is down: that is an absence.
    assert is_absence(EngineRefused(502, "Bad Gateway"))
    assert is_absence(EngineRefused(503, "Service Unavailable"))
    assert not is_absence(refused)


def test_a_change_is_sent_again_only_where_it_never_reached_an_engine() -> None:
    absence = Absence(ride_over_s=60)
    refused = Unreachable("cannot reach the engine: [Errno 111] Connection refused", unsent=True)
    assert absence.lost(refused, 0.0, unsent_only=True) == 0.25
    # Cut after it was sent: the engine may have done it, so it is said at once.
    reset = Unreachable("cannot reach the engine: [Errno 104] Connection reset by peer")
    with pytest.raises(Unreachable, match="reset"):
        absence.lost(reset, 1.0, unsent_only=True)
