"""The agent machine (``fluksio.agent.machine.agent_machine``): the races fixed in the
session before it existed, as stories; then against its naive reference over event
sequences Hypothesis draws. An agent is sent calls, some ahead of a free slot; they are
cancelled, they end, their events and answers go out; pings go and pongs come back; the
connection drops with or without the engine's close, the engine says it is going away,
welcomes the agent back, or stays away past ``engine_away_s``. After every event both must
agree, and:

- no call starts twice, and no more than ``parallel`` run at once;
- a call cancelled while it waits never starts, and says so once;
- a close by the engine other than "going away" stops every call; a drop keeps them;
- an answer sent and not confirmed by a pong when the connection ends is held, named in
  the next hello and sent again after the welcome (unless the calls were stopped).
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fluksio.agent.machine.agent_machine import (
    CLOSE_GOING_AWAY,
    AgentEffect,
    AgentMachine,
    Away,
    GiveUp,
    Kill,
    Ping,
    Send,
    Start,
    Welcome,
)
from fluksio.agent.machine.reference import Happened, ReferenceAgent
from fluksio.agent.protocol.frames import AnswerFrame, ProgressFrame
from tests.support.properties import against_reference

PIPELINED = Welcome(logs=True, cache=True, pipeline=2, take_s=15.0)


def _answer(call_id: str) -> AnswerFrame:
    return AnswerFrame(call_id=call_id, ok=True, result=call_id)


def _started(effects: list[AgentEffect]) -> list[str]:
    return [e.call_id for e in effects if isinstance(e, Start)]


def _sent(effects: list[AgentEffect]) -> list[tuple[str, str]]:
    return [(type(e.frame).__name__, e.frame.call_id) for e in effects if isinstance(e, Send)]


# -- the races the session fixed, as stories ------------------------------------------------


def test_a_call_cancelled_while_it_waits_for_a_slot_never_starts() -> None:
    # Issue 24's frozen worker: it wakes to the run frame and the engine's cancel behind it.
    agent = AgentMachine(1, relayed=False, engine_away_s=600)
    agent.welcomed(PIPELINED)
    assert _started(agent.run("first")) == ["first"]
    assert _started(agent.run("second")) == []
    assert _sent(agent.cancel("second")) == [("AnswerFrame", "second")]
    assert _started(agent.ended(_answer("first"))) == [], "the cancelled call never starts"
    assert agent.cancel("second") == [], "said once"
    # One started at once and cancelled at once is stopped (the launcher keeps the word).
    agent.run("third")
    assert agent.cancel("third") == [Kill("third")]


def test_a_drop_reported_as_a_clean_close_without_a_close_frame_keeps_the_calls() -> None:
    # aiohttp reports a bare end of stream as 1000 OK or 1006, by race: only the engine's
    # own close frame says the engine ended the calls.
    agent = AgentMachine(2, relayed=True, engine_away_s=600)
    agent.welcomed(PIPELINED)
    agent.run("kept")
    assert agent.dropped(closed_by_engine=False, code=1000, now=10.0) == [Away(1, False)]
    assert agent.resume() == ["kept"]


def test_an_agent_holding_nothing_still_says_it_was_away() -> None:
    # A run frame lost with the path: the engine must hear "I hold nothing", not nothing.
    agent = AgentMachine(2, relayed=True, engine_away_s=600)
    agent.welcomed(PIPELINED)
    agent.dropped(closed_by_engine=False, code=None, now=10.0)
    assert agent.resume() == []


def test_an_unconfirmed_answer_is_named_and_sent_again_and_a_confirmed_one_is_not() -> None:
    agent = AgentMachine(2, relayed=False, engine_away_s=600)
    agent.welcomed(PIPELINED)
    for call_id in ("recorded", "in-flight"):
        agent.run(call_id)
    agent.answer_sent(_answer("recorded"), 100)
    ping = agent.ping()
    agent.answer_sent(_answer("in-flight"), 100)
    agent.pong(ping.payload)  # confirms only what was sent before its ping
    agent.dropped(closed_by_engine=True, code=CLOSE_GOING_AWAY, now=10.0)
    assert agent.resume() == ["in-flight", "recorded"], "both still run"
    effects = agent.welcomed(PIPELINED)
    assert _sent(effects) == [("AnswerFrame", "in-flight")]


def test_an_engine_away_past_its_limit_is_given_up_and_its_calls_stopped() -> None:
    agent = AgentMachine(1, relayed=False, engine_away_s=600)
    agent.welcomed(PIPELINED)
    agent.run("running")
    agent.run("waiting")
    agent.dropped(closed_by_engine=False, code=None, now=10.0)
    assert agent.check(now=609.0) == []
    assert agent.check(now=610.0) == [Kill("running"), Kill("waiting"), GiveUp(2)]


# -- against the reference ---------------------------------------------------------------------


class AgentComparison(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ids = (f"c{i}" for i in itertools.count())
        self.sent_runs: list[str] = []
        self.started: list[str] = []
        self.killed: set[str] = set()
        self.pings: list[int] = []
        self.payloads: dict[int, bytes] = {}
        self.answers_out: list[str] = []

    @initialize(parallel=st.integers(1, 3), relayed=st.booleans())
    def attach(self, parallel: int, relayed: bool) -> None:
        self.parallel = parallel
        self.machine = AgentMachine(parallel, relayed=relayed, engine_away_s=600)
        self.reference = ReferenceAgent(parallel, relayed, 600)
        self.happen(Happened("welcomed", pipeline=True), self.machine.welcomed(PIPELINED))

    # -- carrying effects out, as the session would ---------------------------------------

    def happen(self, happened: Happened, effects: list[AgentEffect]) -> None:
        self.reference.record(happened)
        for effect in effects:
            if isinstance(effect, Start):
                assert effect.call_id not in self.started, f"{effect.call_id} started twice"
                self.started.append(effect.call_id)
            elif isinstance(effect, Kill):
                self.killed.add(effect.call_id)
            elif isinstance(effect, Send) and isinstance(effect.frame, AnswerFrame):
                self.answers_out.append(effect.frame.call_id)
                size = 10
                self.happen(
                    Happened("answer_sent", call=effect.frame.call_id),
                    self.machine.answer_sent(effect.frame, size),
                )
            elif isinstance(effect, Ping):
                self.record_ping(effect)

    def record_ping(self, ping: Ping) -> None:
        number = int(ping.payload)
        self.payloads[number] = ping.payload
        self.pings.append(number)
        self.reference.record(Happened("ping", payload=number))

    # -- what happens ------------------------------------------------------------------------

    @precondition(lambda self: not self.machine.attached)
    @rule(pipelined=st.booleans(), data=st.data())
    def welcome(self, pipelined: bool, data: st.DataObject) -> None:
        """Welcomed (again): an engine that does not say what it carries on, or one that
        carries on some of what the hello named (a restarted one adopts, a live one after
        a drop carries on nothing)."""
        named = self.machine.resume() or []
        some = st.lists(st.sampled_from(named), unique=True) if named else st.just([])
        kept = data.draw(st.none() | some)
        said = frozenset(kept) if kept is not None else None
        welcome = Welcome(logs=True, pipeline=2 if pipelined else 0, take_s=15.0, kept=said)
        effects = self.machine.welcomed(welcome)
        if said is not None:
            dropped = set(named) - said
            assert not {e.call_id for e in effects if isinstance(e, Start)} & dropped
            assert not {f for kind, f in _sent(effects) if kind == "AnswerFrame"} & dropped
        told = tuple(kept) if kept is not None else None
        self.happen(Happened("welcomed", pipeline=pipelined, kept=told), effects)

    @precondition(lambda self: self.machine.attached)  # frames come only over a connection
    @rule()
    def run_frame(self) -> None:
        call_id = next(self.ids)
        self.sent_runs.append(call_id)
        self.happen(Happened("run", call=call_id), self.machine.run(call_id))

    @precondition(lambda self: bool(self.sent_runs) and self.machine.attached)
    @rule(data=st.data())
    def cancel_frame(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.sent_runs))
        self.happen(Happened("cancel", call=call_id), self.machine.cancel(call_id))

    @precondition(lambda self: bool(self.reference.walk().running))
    @rule(data=st.data())
    def call_ends(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.reference.walk().running))
        self.happen(Happened("ended", call=call_id), self.machine.ended(_answer(call_id)))

    @precondition(lambda self: bool(self.reference.walk().running))
    @rule(data=st.data())
    def call_emits(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self.reference.walk().running))
        frame = ProgressFrame(call_id=call_id, event="emit", outputs={"n": 1})
        self.happen(Happened("event", call=call_id), self.machine.deliver(frame))

    @precondition(lambda self: self.machine.attached)
    @rule()
    def regular_ping(self) -> None:
        self.record_ping(self.machine.ping())

    @precondition(lambda self: bool(self.pings))
    @rule(data=st.data())
    def pong(self, data: st.DataObject) -> None:
        number = data.draw(st.sampled_from(self.pings))
        self.pings.remove(number)
        self.machine.pong(self.payloads[number])
        self.reference.record(Happened("pong", payload=number))

    @precondition(lambda self: self.machine.attached)
    @rule(how=st.sampled_from(["drop", "ok-by-race", "going-away", "closed"]))
    def connection_ends(self, how: str) -> None:
        closed = how in ("going-away", "closed")
        code = {"drop": None, "ok-by-race": 1000, "going-away": CLOSE_GOING_AWAY}.get(how, 1008)
        self.now += 1
        effects = self.machine.dropped(closed_by_engine=closed, code=code, now=self.now)
        self.pings.clear()  # pongs of a connection gone never come
        self.happen(Happened("dropped", closed_by_engine=closed, code=code, now=self.now), effects)
        if how == "closed":
            running = set(self.reference.walk().running)
            assert running <= self.killed, "a close by the engine stops every call"
        else:
            assert not any(isinstance(e, Kill) for e in effects), "a drop keeps the calls"

    @rule(seconds=st.sampled_from([1.0, 300.0, 700.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        effects = self.machine.check(self.now)
        self.happen(Happened("check", now=self.now), effects)

    # -- what must always hold -------------------------------------------------------------

    @invariant()
    def agrees_with_the_reference(self) -> None:
        walked = self.reference.walk()
        assert set(self.machine.calls()) == {*walked.running, *walked.waiting}
        assert self.machine.waiting() == walked.waiting
        assert self.machine.resume() == self.reference.resume()
        assert self.started == walked.started
        assert self.machine.idle() == (
            not walked.running and not walked.waiting and not walked.held
        )

    @invariant()
    def slots_are_never_overcommitted(self) -> None:
        assert len(self.reference.walk().running) <= self.parallel


TestAgentMachineAgreesWithItsReference = against_reference(AgentComparison)


def test_a_waiting_call_never_starts_while_away_nor_after_if_the_engine_dropped_it() -> None:
    # An engine that lived through the drop failed or requeued what it had sent: a call
    # the worker had not started may be running elsewhere already.
    agent = AgentMachine(1, relayed=False, engine_away_s=600)
    agent.welcomed(PIPELINED)
    agent.run("running")
    agent.run("waiting")
    agent.dropped(closed_by_engine=False, code=None, now=10.0)
    assert _started(agent.ended(_answer("running"))) == [], "not while away"
    assert agent.resume() == ["running", "waiting"]
    back = agent.welcomed(Welcome(logs=True, pipeline=2, take_s=15.0, kept=frozenset()))
    assert _started(back) == [] and _sent(back) == [], "nothing the engine does not carry on"
    assert agent.calls() == []


def test_the_last_calls_answer_asks_for_its_confirmation_at_once() -> None:
    # Else an idle agent would hold it unconfirmed until its next ping, and with the
    # engine gone meanwhile could not stop at --max-idle (its Slurm job held for nothing).
    agent = AgentMachine(2, relayed=False, engine_away_s=600)
    agent.welcomed(PIPELINED)
    agent.run("first")
    agent.run("last")
    agent.ended(_answer("first"))
    assert agent.answer_sent(_answer("first"), 10) == [], "another call still runs"
    agent.ended(_answer("last"))
    (ping,) = agent.answer_sent(_answer("last"), 10)
    assert isinstance(ping, Ping)
    agent.pong(ping.payload)
    agent.dropped(closed_by_engine=False, code=None, now=5.0)
    assert agent.idle()
