"""The connection machine against its naive reference, over event sequences Hypothesis draws.

A worker, attached directly or through a relay, by our agent or the published one, is
sent calls with and without a ``limit``; it is heard or silent while the clock moves and
the timers its calls set go off; it answers, sends frames of calls it was never sent and
frames too large; the watcher looks; this side closes it for any reason; its socket ends
(or an old one does); an away worker comes back naming some of its calls, and some it
never had. After every event both must agree, and the effects must keep the promises the
dispatcher and the run machine rely on:

- every call sent ends exactly once (answered or failed, as the reference says, with the
  kind it says), and no call the machine still holds has ended;
- the worker is told to cancel exactly the calls the reference says, in order;
- the scheduler is told "answering" or "not answering" only when that changes, and it
  ends up as the reference says;
- the socket is closed at most once, the worker is gone at most once and only at the end,
  and an away worker's calls are held, never failed by the drop itself.
"""

from __future__ import annotations

import heapq
import itertools

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.engine.workers.connection import effects as connection_effects
from fluksio.engine.workers.connection import machine as connection
from fluksio.engine.workers.connection.reference import Happened, ReferenceConnection
from tests.support.properties import against_reference

RULES = connection.ConnectionRules(
    take_within_s=15.0, answer_within_s=22.5, gone_after_s=90.0, limit_backstop_s=13.0
)


class ConnectionComparison(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000.0
        self.ids = (f"c{i}" for i in itertools.count())
        self.sent: list[str] = []
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.cancels: list[str] = []
        self.answering = True
        self.timers: list[tuple[float, int, str, str]] = []
        self.order = itertools.count()
        self.closed_sockets = 0
        self.gone = 0
        self.away = 0

    @initialize(
        relayed=st.booleans(),
        published=st.booleans(),
        pipelined=st.booleans(),
        held=st.lists(st.sampled_from(["old1", "old2"]), unique=True),
        adopting=st.lists(st.sampled_from(["old1", "old2"]), unique=True),
    )
    def welcome(
        self, relayed: bool, published: bool, pipelined: bool, held: list[str], adopting: list[str]
    ) -> None:
        pipelined = pipelined and not published  # the published agent takes nothing ahead
        self.machine = connection.ConnectionMachine(
            "box", relayed, published, self.now, RULES, pipelined=pipelined
        )
        self.reference = ReferenceConnection(relayed, self.now, RULES, pipelined)
        # A restarted engine adopts some of what the worker names (never what it does not).
        adopted = [] if published else [c for c in held if c in adopting]
        self.sent += adopted
        happened = Happened("welcomed", resume=tuple(held), adopted=tuple(adopted))
        self.happen(happened, self.machine.welcomed(held, adopted))

    # -- carrying effects out, as a session would --------------------------------------

    def happen(
        self, happened: Happened, effects: list[connection_effects.ConnectionEffect]
    ) -> None:
        self.reference.record(happened)
        ended: list[str] = []
        for effect in effects:
            if isinstance(effect, connection_effects.Fail):
                assert effect.call_id not in self.outcomes, f"{effect.call_id} ended twice"
                self.outcomes[effect.call_id] = ("failed", effect.error["type"])
                ended.append(effect.call_id)
            elif isinstance(effect, connection_effects.Cancel):
                self.cancels.append(effect.call_id)
            elif isinstance(effect, connection_effects.Wake):
                due = self.now + effect.delay_s
                heapq.heappush(self.timers, (due, next(self.order), effect.kind, effect.call_id))
            elif isinstance(effect, connection_effects.Answering):
                assert effect.answering != self.answering, "told what it already knew"
                self.answering = effect.answering
            elif isinstance(effect, connection_effects.CloseSocket):
                self.closed_sockets += 1
            elif isinstance(effect, connection_effects.Gone):
                self.gone += 1
            elif isinstance(effect, connection_effects.Away):
                assert self.machine.in_flight(), "away only with calls held for it"
                self.away += 1
        for call_id in ended:  # the call's owner has its outcome and stops waiting
            self.machine.ended(call_id)
            self.reference.record(Happened("ended", call=call_id))

    # -- what happens ------------------------------------------------------------------

    @rule(limit=st.sampled_from([0.0, 5.0, 60.0]))
    def send(self, limit: float) -> None:
        call_id = next(self.ids)
        self.sent.append(call_id)
        effects = self.machine.send(call_id, limit, self.now)
        self.happen(Happened("send", call=call_id, limit=limit, now=self.now), effects)

    @rule()
    def send_fails(self) -> None:
        """A run frame whose write fails: the socket is going as it is sent."""
        self.send(0.0)
        call_id = self.sent[-1]
        effects = self.machine.send_failed(call_id, "closing transport")
        self.happen(Happened("send_failed", call=call_id), effects)

    @rule(seconds=st.sampled_from([1.0, 7.0, 16.0, 30.0, 95.0]))
    def time_passes(self, seconds: float) -> None:
        until = self.now + seconds
        while self.timers and self.timers[0][0] <= until:
            due, _, kind, call_id = heapq.heappop(self.timers)
            self.now = due
            effects = self.machine.timer(kind, call_id)  # type: ignore[arg-type]
            self.happen(Happened("timer", call=call_id, kind=kind, now=due), effects)
        self.now = until

    @rule()
    def heard(self) -> None:
        self.happen(Happened("heard", now=self.now), self.machine.heard_from(self.now))

    @rule(data=st.data(), last=st.booleans(), started=st.booleans())
    def frame(self, data: st.DataObject, last: bool, started: bool) -> None:
        call_id = data.draw(st.sampled_from([*self.sent, "never-sent"]))
        live = self.machine.expects(call_id)
        what = "answer" if last else "started" if started else "log"
        effects = self.machine.frame(call_id, what, self.now, last=last)
        unknown = any(isinstance(effect, connection_effects.Unknown) for effect in effects)
        assert unknown != live, "a frame of a call in flight is its owner's"
        self.happen(Happened("frame", call=call_id, last=last, kind=what, now=self.now), effects)
        if live and last:
            self.outcomes[call_id] = ("answered", "")
            self.machine.ended(call_id)
            self.reference.record(Happened("ended", call=call_id))

    @rule(data=st.data())
    def oversized(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from([*self.sent, "never-sent"]))
        effects = self.machine.oversized(call_id, "progress", 70_000, self.now)
        self.happen(Happened("oversized", call=call_id, now=self.now), effects)

    @rule(busy=st.booleans())
    def watcher_looks(self, busy: bool) -> None:
        effects = self.machine.check(self.now, busy=busy)
        self.happen(Happened("check", now=self.now), effects)

    @rule(kind=st.sampled_from([ErrorKind.WORKER_GONE, ErrorKind.FRAME_TOO_LARGE]))
    def this_side_closes(self, kind: ErrorKind) -> None:
        effects = self.machine.close("the worker token was revoked", 1008, kind)
        self.happen(Happened("close", kind=kind.value), effects)

    @rule(stale=st.booleans())
    def socket_ends(self, stale: bool) -> None:
        socket = self.machine.socket - 1 if stale else self.machine.socket
        self.happen(Happened("socket_end", socket=socket), self.machine.socket_ended(socket))

    @precondition(lambda self: self.machine.phase == "away")
    @rule(data=st.data())
    def comes_back(self, data: st.DataObject) -> None:
        named = st.sampled_from([*self.machine.in_flight(), *self.sent[-2:], "ghost"])
        resume = data.draw(st.lists(named, unique=True))
        effects = self.machine.came_back(resume, self.now)
        self.happen(Happened("back", resume=tuple(resume), now=self.now), effects)

    # -- what must hold ------------------------------------------------------------------

    @invariant()
    def agrees_with_the_reference(self) -> None:
        reference = self.reference
        assert self.machine.phase == reference.phase()
        assert self.machine.in_flight() == reference.live()
        for call_id in self.sent:
            fate = reference.fate(call_id)
            if fate[0] == "live":
                assert call_id not in self.outcomes
            else:
                assert self.outcomes.get(call_id) == fate, call_id
        assert self.cancels == reference.cancelled()
        assert self.answering == self.machine.answering == reference.answering()

    @invariant()
    def ends_once(self) -> None:
        assert self.closed_sockets <= 1
        assert self.gone == (1 if self.machine.phase == "gone" else 0)


test_connection_machine_keeps_the_reference_rules = against_reference(ConnectionComparison)
