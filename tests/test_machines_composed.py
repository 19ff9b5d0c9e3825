"""Both sides of a worker's connection composed: the agent's machine and the engine's
connection machine, with the engine's store and its adoption rule after a restart, over a
link that drops what it carries, while the engine is killed, stopped for an upgrade, or
closes the connection. Hypothesis draws the sequences. Frames cross in order; a drop
loses what was on the way, both ways; a killed engine keeps only its store.

No node retries here but one: a call failed for the silence of a path that went quiet
(neither side told; the agent keeps the call, as for a restart) runs again on another
worker once this one can no longer run it: welcomed since and told to drop it, or gone
after giving the engine up (issue 64, item 4). So the promises are: no node's call runs
twice at once, and none starts twice but that retry; once everything has settled (the
link up, every frame across, every call ended), no node is lost (none left running or
queued for ever), and each that succeeded without a retry ran exactly once. Allowing the
retry at once fails the model (tried).

One case is outside them, and named in ``requeues_untaken``'s documentation: a call sent
ahead that the worker started just before a drop, whose ``started`` word was lost with
the link, is queued again by an engine that lived through the drop (it believes the call
never started); the worker stops its copy when it is back. The model lets that case
through and only that one.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from fluksio.agent.machine.agent_machine import (
    CLOSE_GOING_AWAY,
    AgentEffect,
    AgentMachine,
    GiveUp,
    Kill,
    Ping,
    Send,
    Start,
    Welcome,
)
from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord, ProgressFrame
from fluksio.engine.workers.connection.effects import Cancel, ConnectionEffect, Fail
from fluksio.engine.workers.connection.machine import ConnectionMachine
from tests.support.properties import against_reference

WELCOME = Welcome(logs=True, cache=False, pipeline=2, take_s=15.0, gone_s=90.0)
GONE_S = 90.0
"""Both sides' silence rule (the agent takes the engine's from its welcome)."""
AWAY_S = 600.0
"""How long the agent keeps its calls for a lost engine (``--engine-away-s``)."""
ENDED = ("succeeded", "failed", "requeued")


class Composed(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = (f"c{i}" for i in itertools.count())
        self.now = 0.0
        # The engine: its store survives it; the rest is its memory.
        self.store: dict[str, str] = {}
        self.node_of: dict[str, str] = {}
        """Each call's node: a call queued again (``NotTaken``) is a new call of it."""
        self.gap: set[str] = set()
        """Nodes queued again though their call had started (the one case let through)."""
        self.awaiting: set[str] = set()
        self.connection: ConnectionMachine | None = None
        # The link, each way, in order.
        self.down: list[tuple[str, str]] = []
        self.up: list[tuple[str, str]] = []
        # The agent and its processes.
        self.agent = AgentMachine(1, relayed=False, engine_away_s=AWAY_S)
        self.executing: set[str] = set()
        self.dying: set[str] = set()
        self.executions: collections.Counter[str] = collections.Counter()
        """Starts, by node."""
        self.started: set[str] = set()
        self.answered_ok: set[str] = set()
        self.welcomes = 0
        """How many times the agent was welcomed (a welcome tells it what to drop)."""
        self.lingering: dict[str, int] = {}
        """Calls failed for silence, which the agent may run still: each with the welcomes
        counted then. Its node runs again (a retry) only once the agent was welcomed
        since (told to drop it) or gave the engine up (stopped it)."""
        self.retried: set[str] = set()
        """Nodes run again after a silent path."""
        self.fresh_agent = False
        """The agent is a new one, the last having given the engine up."""
        self.attach()

    # -- the link and both sides' effects --------------------------------------------------

    def agent_does(self, effects: list[AgentEffect]) -> None:
        for effect in effects:
            if isinstance(effect, Start):
                node = self.node_of[effect.call_id]
                running = {self.node_of[c] for c in self.executing}
                assert node not in running, f"{node} runs twice at once"
                again = node in self.gap or node in self.retried
                assert self.executions[node] == 0 or again, f"{node} started twice"
                self.executions[node] += 1
                self.started.add(effect.call_id)
                self.executing.add(effect.call_id)
            elif isinstance(effect, Kill) and effect.call_id in self.executing:
                self.executing.discard(effect.call_id)
                self.dying.add(effect.call_id)
            elif isinstance(effect, Send) and isinstance(effect.frame, AnswerFrame):
                self.up.append(("answer", effect.frame.call_id))
                self.agent_does(self.agent.answer_sent(effect.frame, 10))
            elif isinstance(effect, Send) and isinstance(effect.frame, ProgressFrame):
                self.up.append(("started", effect.frame.call_id))
            elif isinstance(effect, Ping):
                self.up.append(("ping", effect.payload.decode()))

    def engine_does(self, effects: list[ConnectionEffect]) -> None:
        for effect in effects:
            if isinstance(effect, Fail) and effect.error["type"] == "NotTaken":
                self.requeue(effect.call_id)
            elif isinstance(effect, Fail) and effect.lingers:
                self.record(effect.call_id, "failed")
                self.lingering[effect.call_id] = self.welcomes
            elif isinstance(effect, Fail):
                self.record(effect.call_id, "failed")
            elif isinstance(effect, Cancel):
                self.down.append(("cancel", effect.call_id))

    def record(self, call_id: str, state: str) -> None:
        assert self.store[call_id] not in ENDED, f"{call_id} ended twice"
        self.store[call_id] = state
        if self.connection is not None:
            self.connection.ended(call_id)

    def requeue(self, call_id: str) -> None:
        """The call never ran, as far as the engine knows: its node goes back in line."""
        node = self.node_of[call_id]
        if self.executions[node]:
            self.gap.add(node)  # it did start: its ``started`` word was lost
        self.record(call_id, "requeued")
        again = next(self.ids)
        self.node_of[again] = node
        self.store[again] = "queued"

    def attach(self) -> None:
        """The agent dials and is welcomed; a restarted engine sorts what it awaited."""
        resume = self.agent.resume()
        named = set(resume or ())
        adopted = {c for c in self.awaiting if c in named}
        if resume is None and self.fresh_agent:  # what it ran stopped with the one before
            for call_id in sorted(self.awaiting):
                self.record(call_id, "failed")
            self.awaiting = set()
        self.fresh_agent = False
        for call_id in sorted(self.awaiting - adopted):
            # Not named by an agent that names what it holds: it never reached it.
            assert resume is not None, "our agent names what it holds after any drop"
            assert call_id not in self.started, "never reached it"
            self.requeue(call_id)
        self.awaiting = set()
        self.welcomes += 1
        self.connection = ConnectionMachine("box", False, False, self.now, pipelined=True)
        self.engine_does(self.connection.welcomed(sorted(named), adopted))
        kept = frozenset(adopted) if resume is not None else None
        self.agent_does(self.agent.welcomed(dataclasses.replace(WELCOME, kept=kept)))

    # -- what happens ------------------------------------------------------------------------

    @rule()
    def submit(self) -> None:
        call_id = next(self.ids)
        self.node_of[call_id] = call_id
        self.store[call_id] = "queued"

    @precondition(lambda self: self.connection is not None)
    @rule()
    def dispatch(self) -> None:
        assert self.connection is not None
        queued = [c for c, state in self.store.items() if state == "queued"]
        if not queued or len(self.connection.in_flight()) >= 3:
            return
        call_id = queued[0]
        self.store[call_id] = "running"  # written before its run frame goes out
        self.engine_does(self.connection.send(call_id, 0.0, self.now))
        self.down.append(("run", call_id))

    @precondition(lambda self: bool(self.down))
    @rule()
    def agent_reads(self) -> None:
        what, call_id = self.down.pop(0)
        if what == "run":
            self.agent_does(self.agent.run(call_id))
        elif what == "cancel":
            self.agent_does(self.agent.cancel(call_id))
        else:
            self.agent.pong(call_id.encode())

    @precondition(lambda self: bool(self.up) and self.connection is not None)
    @rule()
    def engine_reads(self) -> None:
        assert self.connection is not None
        what, call_id = self.up.pop(0)
        if what == "ping":  # answered once what came before it is recorded (it is)
            self.down.append(("pong", call_id))
            return
        if what == "started":
            self.engine_does(self.connection.frame(call_id, "started", self.now, last=False))
            return
        if self.connection.frame(call_id, "answer", self.now, last=True):
            return  # not in flight here (ended already): a late copy
        self.record(call_id, "succeeded" if call_id in self.answered_ok else "failed")

    @precondition(lambda self: bool(self.executing | self.dying))
    @rule(data=st.data())
    def a_call_ends(self, data: st.DataObject) -> None:
        self.end(data.draw(st.sampled_from(sorted(self.executing | self.dying))))

    def end(self, call_id: str) -> None:
        """The call's process ends: done, or stopped if it was killed."""
        ok = call_id in self.executing
        self.executing.discard(call_id)
        self.dying.discard(call_id)
        if ok:
            self.answered_ok.add(call_id)
        error = None if ok else ErrorRecord(type="NodeCancelled", message="stopped")
        self.agent_does(self.agent.ended(AnswerFrame(call_id=call_id, ok=ok, error=error)))

    @precondition(lambda self: self.agent.attached)
    @rule()
    def regular_ping(self) -> None:
        self.agent_does([self.agent.ping()])

    @precondition(lambda self: self.connection is not None)
    @rule(how=st.sampled_from(["link drops", "engine killed", "engine upgraded", "closed"]))
    def connection_ends(self, how: str) -> None:
        assert self.connection is not None
        self.now += 1
        self.down.clear()
        self.up.clear()
        if how == "link drops":  # the engine lives: a closed connection fails its calls
            self.engine_does(self.connection.socket_ended(self.connection.socket))
        elif how == "closed":  # superseded, silent, revoked: its calls fail, with a close
            self.engine_does(self.connection.close("closed"))
        self.connection = None
        if how in ("engine killed", "engine upgraded"):  # only the store is left
            self.awaiting = {c for c, state in self.store.items() if state == "running"}
        by_engine = how in ("engine upgraded", "closed")
        code = CLOSE_GOING_AWAY if how == "engine upgraded" else (1008 if by_engine else None)
        self.agent_does(self.agent.dropped(closed_by_engine=by_engine, code=code, now=self.now))

    @precondition(lambda self: self.connection is not None)
    @rule()
    def the_path_goes_silent(self) -> None:
        """Nothing more crosses, and neither side is told: the engine fails the calls by
        its silence rule (they may run on: lingering), and the agent gives the silent
        engine up by the same rule and keeps them, as it would for a restart."""
        assert self.connection is not None
        self.down.clear()
        self.up.clear()
        self.now += GONE_S + 1
        self.engine_does(self.connection.check(self.now, busy=True))
        self.connection = None
        self.agent_does(self.agent.dropped(closed_by_engine=False, code=None, now=self.now))

    @precondition(lambda self: self.connection is None and self.agent.engine_away_s is not None)
    @rule()
    def the_agent_gives_the_engine_up(self) -> None:
        """Away past its --engine-away-s, the agent stops its calls and leaves; a new one
        starts in its place (a service manager, a batch job's next worker)."""
        self.now += AWAY_S + 1
        effects = self.agent.check(self.now)
        self.agent_does(effects)
        if any(isinstance(effect, GiveUp) for effect in effects):
            self.agent = AgentMachine(1, relayed=False, engine_away_s=AWAY_S)
            self.fresh_agent = True
            self.lingering = dict.fromkeys(self.lingering, -1)  # stopped: safe to run again

    @precondition(lambda self: self.safe_to_retry())
    @rule()
    def a_lingering_call_runs_again_elsewhere(self) -> None:
        """The engine's retry of a call failed for silence, on another worker, once this
        one can no longer run the first copy (welcomed since and told to drop it, or it
        gave the engine up): never while the first may still run here."""
        call_id = self.safe_to_retry()[0]
        del self.lingering[call_id]
        node = self.node_of[call_id]
        assert node not in {self.node_of[c] for c in self.executing}, f"{node} runs twice"
        self.retried.add(node)
        self.executions[node] += 1
        again = next(self.ids)
        self.node_of[again] = node
        self.store[again] = "succeeded"  # there, as far as this model goes

    def safe_to_retry(self) -> list[str]:
        return sorted(c for c, seen in self.lingering.items() if seen < self.welcomes)

    @precondition(lambda self: self.connection is None)
    @rule()
    def agent_comes_back(self) -> None:
        self.attach()

    # -- once everything settles ----------------------------------------------------------------

    def teardown(self) -> None:
        if self.connection is None:
            self.attach()
        for _round in range(200):
            moved = bool(self.down or self.up or self.executing or self.dying)
            while self.down or self.up:
                if self.down:
                    self.agent_reads()
                if self.up:
                    self.engine_reads()
            for call_id in sorted(self.executing | self.dying):
                self.end(call_id)
            self.agent_does([self.agent.ping()])
            before = dict(self.store)
            self.dispatch()
            if not moved and before == self.store and not (self.down or self.up):
                break
        lost = {c: s for c, s in self.store.items() if s not in (*ENDED, "requeued")}
        assert not lost, f"never ended: {lost}"
        for call_id, state in self.store.items():
            node = self.node_of[call_id]
            if state == "succeeded" and node not in self.gap | self.retried:
                assert self.executions[node] == 1, f"{node} ran {self.executions[node]} times"


TestBothMachinesKeepEveryCallOnce = against_reference(Composed, examples=1000, steps=60)
