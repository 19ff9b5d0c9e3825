"""The agent's side of its connection as a pure state machine: what happened, with ``now``,
in; what to do, out.

The fourth machine beside the engine's runs, provisioning and connections. It holds what
the agent knows of its calls and of the engine. A call the engine sent is *waiting* (taken
ahead of a free slot) or *running* (in a slot) until it ends; its answer is then sent and
kept until a pong confirms the engine recorded it. The connection is *attached* (from a
welcome), *away* (it ended without the engine closing it, or the engine said it is going
away: the calls go on, their frames are held, and the next hello names them), or *closed*
(the engine closed it otherwise and failed the calls: they are stopped).

Each input is a method named for what happened (welcomed, a run frame, a cancel frame, a
call ended, a frame of a call to go out, an answer sent, a pong, the connection ended,
the clock looked at) and returns effects the session carries out in order:

- :class:`Start` a call in a slot; :class:`Prefetch` its inputs while it waits for one;
  :class:`Taken`: say it was taken (the session's word, deferred: :mod:`~fluksio.agent.taken`);
- :class:`Kill` a call; :class:`Send` a frame; :class:`Ping` the engine, asking it to
  confirm the answers sent before;
- :class:`Away`: the calls are kept through a drop (logged); :class:`GiveUp`: the engine
  did not come back within ``engine_away_s``: what ran is stopped, and the agent exits.

No clock, no I/O, no asyncio: standard library only, like the rest of the agent. The
rules are stated once more, naively, in :mod:`.reference`; the property tests
(``tests/test_agent_machine.py``) hold the two to the same answers, and compose this
machine with the engine's connection machine over a link that drops.
"""

from __future__ import annotations

from dataclasses import dataclass

from fluksio.agent.machine.held import CallFrame, Held
from fluksio.agent.machine.unconfirmed import Unconfirmed
from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord, ProgressFrame, WelcomeFrame
from fluksio.agent.protocol.outcome import ErrorKind, error_record

__all__ = [
    "CLOSE_GOING_AWAY",
    "AgentEffect",
    "AgentMachine",
    "Away",
    "GiveUp",
    "Kill",
    "Ping",
    "Prefetch",
    "Send",
    "Start",
    "Taken",
    "Welcome",
]

CLOSE_GOING_AWAY = 1001
"""The engine's close when it stops (and will be back): its calls go on."""


@dataclass(frozen=True)
class Welcome:
    """What the engine's welcome offers, typed (an older engine offers less)."""

    logs: bool = False
    """It takes a call's lines while it runs."""
    cache: bool = False
    """It takes reports of what the artifact cache holds."""
    pipeline: int = 0
    """Calls it sends ahead of a free slot: each says ``started``."""
    take_s: float | None = None
    """Its take rule: how long it waits to hear from the worker after sending a call."""
    kept: frozenset[str] | None = None
    """Of the calls the hello named, those it carries on (None: it does not say)."""
    stopping: bool = False
    """It takes word that this worker is stopping (and then sends it nothing more)."""
    gone_s: float | None = None
    """Its silence rule, which the worker takes for the engine (None: it says none)."""

    @classmethod
    def of(cls, frame: WelcomeFrame) -> Welcome:
        """What ``frame`` offers, each rule only where it is one (more than none)."""
        return cls(
            kept=None if frame.kept is None else frozenset(frame.kept),
            logs=frame.logs,
            cache=frame.cache,
            stopping=frame.stopping,
            gone_s=_welcome_seconds(frame.gone_s),
            pipeline=max(0, frame.pipeline),
            take_s=_welcome_seconds(frame.take_s),
        )


def _welcome_seconds(value: float | None) -> float | None:
    """A welcome's rule in seconds, None unless it is more than none."""
    return value if value is not None and value > 0 else None


@dataclass(frozen=True)
class _OfCall:
    call_id: str


class Start(_OfCall):
    """Run the call now, in a slot."""


class Prefetch(_OfCall):
    """Fetch the call's inputs while it waits for a slot."""


class Taken(_OfCall):
    """Say the call was taken (a heartbeat), unless another frame says it first."""


class Kill(_OfCall):
    """Stop the call (or, not started yet, make sure it never starts)."""


@dataclass(frozen=True)
class Send:
    frame: CallFrame


@dataclass(frozen=True)
class Ping:
    """Ping the engine with ``payload``: its pong confirms the answers sent before."""

    payload: bytes


@dataclass(frozen=True)
class Away:
    """The connection ended and the calls are kept; ``kept``: how many (running, waiting
    and answered), ``going_away``: the engine said it would be back."""

    kept: int
    going_away: bool


@dataclass(frozen=True)
class GiveUp:
    """The engine has been away ``engine_away_s``: ``stopped`` calls are stopped."""

    stopped: int


AgentEffect = Start | Prefetch | Taken | Kill | Send | Ping | Away | GiveUp


class AgentMachine:
    """The calls of one agent and its connection, from its first hello to its end.

    ``parallel``: its slots; ``relayed``: its path passes a relay (each answer is confirmed
    at once, that path drops more often); ``engine_away_s``: how long an engine that went
    away is waited for (None: for ever).
    """

    def __init__(self, parallel: int, *, relayed: bool, engine_away_s: float | None) -> None:
        self.parallel = parallel
        self.relayed = relayed
        self.engine_away_s = engine_away_s
        self.welcome = Welcome()
        self.attached = False
        self.held = Held()
        self.unconfirmed = Unconfirmed()
        self._waiting: dict[str, None] = {}
        """Calls taken ahead of a free slot, oldest first."""
        self._running: set[str] = set()
        self._left_at: float | None = None
        """When the last welcomed connection ended: the engine is away since."""

    # -- questions -------------------------------------------------------------------------

    def calls(self) -> list[str]:
        """The calls it holds that have not ended: running, then waiting."""
        return [*sorted(self._running), *self._waiting]

    def waiting(self) -> list[str]:
        return list(self._waiting)

    def idle(self) -> bool:
        return not self._running and not self._waiting and not self.held

    def resume(self) -> list[str] | None:
        """What the next hello names: the calls it kept through a drop (None: not away)."""
        return self.held.names(self.calls())

    # -- inputs ----------------------------------------------------------------------------

    def welcomed(self, welcome: Welcome) -> list[AgentEffect]:
        """The engine welcomed it: the calls it kept that the engine does not carry on are
        dropped (waiting) or stopped (running); what was held for the others goes first;
        then waiting calls start in the slots free (none starts while away: the engine
        may have given it to another worker)."""
        self.welcome, self.attached, self._left_at = welcome, True, None
        effects: list[AgentEffect] = []
        dropped: set[str] = set()
        if welcome.kept is not None:
            dropped = set(self.calls()) - welcome.kept
            effects += [Kill(c) for c in sorted(dropped & self._running)]
            for call_id in dropped:
                self._waiting.pop(call_id, None)
        for frame in self.held.take():
            if welcome.kept is None or frame.call_id in welcome.kept:
                effects += self.deliver(frame)
        while self._waiting and len(self._running) < self.parallel:
            effects += self._start(next(iter(self._waiting)))
        return effects

    def run(self, call_id: str) -> list[AgentEffect]:
        """A run frame came: the call starts in a free slot, or waits for one."""
        if call_id in self._running or call_id in self._waiting:
            return []  # the same call again: it runs once
        waits = len(self._running) >= self.parallel or bool(self._waiting)
        effects: list[AgentEffect] = []
        if waits or not self.welcome.pipeline:
            effects.append(Taken(call_id))  # a call starting at once says ``started``
        if waits:
            self._waiting[call_id] = None
            return [*effects, Prefetch(call_id)]
        return [*effects, *self._start(call_id)]

    def cancel(self, call_id: str) -> list[AgentEffect]:
        """A cancel frame came: a running call is stopped; a waiting one never starts, and
        says so."""
        if call_id in self._running:
            return [Kill(call_id)]
        if call_id in self._waiting:
            del self._waiting[call_id]
            return self.deliver(_never_started(call_id))
        return []

    def ended(self, answer: AnswerFrame) -> list[AgentEffect]:
        """A running call ended with ``answer``: it goes out, and its slot to the next."""
        if answer.call_id not in self._running:
            return []
        self._running.discard(answer.call_id)
        effects = self.deliver(answer)
        if self._waiting and self.attached:
            effects += self._start(next(iter(self._waiting)))
        return effects

    def deliver(self, frame: CallFrame) -> list[AgentEffect]:
        """A frame of a call is to go out: now, or held while away (heartbeats are not)."""
        if self.attached:
            return [Send(frame)]
        self.held.hold(frame)
        return []

    def answer_sent(self, answer: AnswerFrame, size: int) -> list[AgentEffect]:
        """An answer of ``size`` bytes went out: kept until confirmed. Confirmed at once
        through a relay, or when it was the last call (an idle agent holding an answer is
        not idle: it could not stop at ``--max-idle`` while the engine is away); else with
        the next ping, or sooner once many wait."""
        self.unconfirmed.sent(answer, size)
        last = not self._running and not self._waiting
        if self.relayed or last or self.unconfirmed.due():
            return [Ping(self.unconfirmed.ping())]
        return []

    def ping(self) -> Ping:
        """The regular ping: it confirms what was sent before it too."""
        return Ping(self.unconfirmed.ping())

    def pong(self, payload: bytes) -> None:
        self.unconfirmed.pong(payload)

    def dropped(self, *, closed_by_engine: bool, code: int | None, now: float) -> list[AgentEffect]:
        """The connection ended. Without the engine's close, or with its going away, the
        calls go on and their frames are held; any other close stops them (the engine has
        failed them)."""
        if self.attached:
            self._left_at = now
        self.attached = False
        unconfirmed = self.unconfirmed.take()  # sent, but perhaps never recorded
        if closed_by_engine and code != CLOSE_GOING_AWAY:
            return self._abandon()
        was_away = self.held.away
        self.held.begin(unconfirmed)
        if was_away:
            return []
        kept = len(self._running) + len(self._waiting) + self.held.answers()
        return [Away(kept, going_away=closed_by_engine)]

    def gives_up_at(self) -> float | None:
        """When :meth:`check` gives up an engine that went away (None: it is attached, or
        waits for ever)."""
        if self._left_at is None or not self.engine_away_s:
            return None
        return self._left_at + self.engine_away_s

    def check(self, now: float) -> list[AgentEffect]:
        """The clock looked at (before each dial): an engine away too long is given up."""
        limit = self.engine_away_s
        if self._left_at is None or not limit or now - self._left_at < limit:
            return []
        stopped = len(self._running) + len(self._waiting)
        return [*self._abandon(), GiveUp(stopped)]

    # -- helpers ---------------------------------------------------------------------------

    def _start(self, call_id: str) -> list[AgentEffect]:
        self._waiting.pop(call_id, None)
        self._running.add(call_id)
        effects: list[AgentEffect] = [Start(call_id)]
        if self.welcome.pipeline:
            effects += self.deliver(ProgressFrame(call_id=call_id, event="started"))
        return effects

    def _abandon(self) -> list[AgentEffect]:
        """Stop every call: running ones are killed, waiting ones never start, nothing
        held goes out."""
        effects: list[AgentEffect] = [Kill(c) for c in [*sorted(self._running), *self._waiting]]
        self._waiting.clear()
        self.held.take()
        return effects


def _never_started(call_id: str) -> AnswerFrame:
    said = error_record(ErrorKind.NODE_CANCELLED, "the call was cancelled before it started")
    return AnswerFrame(call_id=call_id, ok=False, error=ErrorRecord(**said))
