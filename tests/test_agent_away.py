"""The agent while the engine is away: what it keeps of its calls (``fluksio.agent.machine.held``)
and how many answers it keeps unconfirmed (``fluksio.agent.machine.unconfirmed``), so that an
absence of any length loses no answer and no event, and at most the oldest output lines;
and how a fleet of agents comes back (``reconnect_delay``): spread, not in one moment."""

from __future__ import annotations

import collections
import random

from fluksio.agent.attaching import reconnect_delay
from fluksio.agent.machine.held import HELD_LINES_BYTES, Held
from fluksio.agent.machine.unconfirmed import UNASKED_ANSWERS, UNASKED_BYTES, Unconfirmed
from fluksio.agent.protocol.frames import AnswerFrame, LogFrame, ProgressFrame


def test_while_away_answers_and_events_are_all_kept_and_lines_only_the_newest() -> None:
    held = Held()
    held.hold(AnswerFrame(call_id="before", ok=True, result=0))
    assert not held, "not away: nothing is held"
    held.begin([AnswerFrame(call_id="unconfirmed", ok=True, result=1)])
    line = "x" * 1024
    per_frame = 64
    frames = 3 * HELD_LINES_BYTES // (per_frame * len(line))
    for n in range(frames):
        held.hold(LogFrame(call_id="long", first=n * per_frame, lines=[line] * per_frame))
        held.hold(ProgressFrame(call_id="long", event="heartbeat"))
        if n % 100 == 0:
            held.hold(ProgressFrame(call_id="long", event="emit", outputs={"n": n}))
    held.hold(AnswerFrame(call_id="long", ok=True, result=2))
    assert held.names(["running"]) == ["long", "running", "unconfirmed"]
    kept = held.take()
    lines = [f for f in kept if isinstance(f, LogFrame)]
    assert sum(len(f.lines) * len(line) for f in lines) <= HELD_LINES_BYTES
    assert lines[-1].first == (frames - 1) * per_frame, "the newest lines are kept"
    assert [f.first for f in lines] == sorted(f.first for f in lines)
    events = [f for f in kept if isinstance(f, ProgressFrame)]
    assert [e.outputs for e in events] == [{"n": n} for n in range(0, frames, 100)]
    answers = [f.call_id for f in kept if isinstance(f, AnswerFrame)]
    assert answers == ["unconfirmed", "long"]
    assert held.names([]) is None and not held, "welcomed back: no longer away"


def test_unconfirmed_answers_ask_for_a_ping_once_many_or_large() -> None:
    unconfirmed = Unconfirmed()
    for n in range(UNASKED_ANSWERS - 1):
        unconfirmed.sent(AnswerFrame(call_id=f"c{n}", ok=True), 10)
    assert not unconfirmed.due()
    unconfirmed.sent(AnswerFrame(call_id="last", ok=True), 10)
    assert unconfirmed.due()
    payload = unconfirmed.ping()
    assert not unconfirmed.due()
    unconfirmed.sent(AnswerFrame(call_id="large", ok=True), UNASKED_BYTES)
    assert unconfirmed.due()
    unconfirmed.pong(payload)
    assert [a.call_id for a in unconfirmed.take()] == ["large"], "confirmed ones forgotten"


def test_five_thousand_workers_come_back_to_a_restarted_engine_spread_over_seconds() -> None:
    # Each dials a gone engine with its own back-off; the engine is back after 5 s.
    draws = random.Random(50)  # noqa: S311 - a drawn spread, not a secret
    back_at: list[float] = []
    for _worker in range(5000):
        waited, failures = 0.0, 0
        while waited < 5.0:
            waited += reconnect_delay(failures, 30.0, draws.random())
            failures += 1
        back_at.append(waited)
    busiest = max(collections.Counter(int(at) for at in back_at).values())
    # Before (each wait drawn from the upper half of its window): 2,480 in one second;
    # now 1,419.
    assert busiest < 5000 / 3, busiest
