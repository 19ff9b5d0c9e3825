"""The agent machine's rules as a naive model: every answer recomputed from the whole
history.

This is the specification of :class:`~.machine.AgentMachine` in executable form. It
keeps nothing but the list of what happened; each question (which calls run, which wait,
what the next hello names, which answers it would send again) is answered by walking that
list from the start with plain lists, one rule per kind of event. Output lines are left
out (their bound is :mod:`.held`'s, tested on its own). The property tests
(``tests/test_agent_machine.py``) drive both with the same events and require the same
answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Happened", "ReferenceAgent", "Walked"]

GOING_AWAY = 1001


@dataclass(frozen=True)
class Happened:
    """One thing that happened: ``what`` names it; the other fields are its details."""

    what: str
    """welcomed, run, cancel, ended, event, answer_sent, ping, pong, dropped, check"""
    call: str = ""
    pipeline: bool = False
    closed_by_engine: bool = False
    code: int | None = None
    now: float = 0.0
    payload: int = 0
    kept: tuple[str, ...] | None = None
    """At a welcome: of the calls the hello named, those the engine carries on."""


@dataclass
class Walked:
    """What the history comes to."""

    running: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    """Every call ever started, in order (a call twice here ran twice)."""
    attached: bool = False
    away: bool = False
    held: list[tuple[str, str]] = field(default_factory=list)
    """Frames held while away: (kind, call), kind ``answer`` or ``event``."""
    unconfirmed: list[str] = field(default_factory=list)
    """Answers sent that no pong has confirmed, in the order sent."""
    gave_up: bool = False


@dataclass
class ReferenceAgent:
    parallel: int
    relayed: bool
    engine_away_s: float | None
    history: list[Happened] = field(default_factory=list)

    def record(self, happened: Happened) -> None:
        self.history.append(happened)

    def walk(self) -> Walked:  # noqa: PLR0912, PLR0915 - one rule per kind of event, in one place
        state = Walked()
        pings: dict[int, list[str]] = {}
        pipeline = False
        left_at: float | None = None

        def out(kind: str, call: str) -> None:
            """A frame goes out, or is held while away."""
            if state.attached:
                return
            if state.away:
                state.held.append((kind, call))

        def start(call: str) -> None:
            state.running.append(call)
            state.started.append(call)
            if pipeline:
                out("event", call)

        for event in self.history:
            call = event.call
            if event.what == "welcomed":
                state.attached, state.away, left_at = True, False, None
                pipeline = event.pipeline
                kept = event.kept
                if kept is not None:  # the others: waiting ones dropped, running ones stopped
                    state.waiting = [c for c in state.waiting if c in kept]
                state.held = []
                while state.waiting and len(state.running) < self.parallel:
                    start(state.waiting.pop(0))
            elif event.what == "run":
                if call in state.running or call in state.waiting:
                    continue
                if len(state.running) < self.parallel and not state.waiting:
                    start(call)
                else:
                    state.waiting.append(call)
            elif event.what == "cancel" and call in state.waiting:
                state.waiting.remove(call)
                out("answer", call)
            elif event.what == "ended" and call in state.running:
                state.running.remove(call)
                out("answer", call)
                if state.waiting and state.attached:
                    start(state.waiting.pop(0))
            elif event.what == "event":
                out("event", call)
            elif event.what == "answer_sent":
                state.unconfirmed.append(call)
            elif event.what == "ping":
                pings[event.payload] = list(state.unconfirmed)
            elif event.what == "pong":
                confirmed = pings.pop(event.payload, [])
                state.unconfirmed = [c for c in state.unconfirmed if c not in confirmed]
            elif event.what == "dropped":
                if state.attached:
                    left_at = event.now
                state.attached = False
                unconfirmed, state.unconfirmed, pings = state.unconfirmed, [], {}
                if event.closed_by_engine and event.code != GOING_AWAY:
                    state.waiting, state.held, state.away = [], [], False
                else:
                    state.away = True
                    state.held = [("answer", c) for c in unconfirmed] + state.held
            elif event.what == "check":
                limit = self.engine_away_s
                if left_at is not None and limit and event.now - left_at >= limit:
                    state.waiting, state.held, state.away = [], [], False
                    state.gave_up = True
        return state

    # -- questions -------------------------------------------------------------------------

    def calls(self) -> set[str]:
        walked = self.walk()
        return {*walked.running, *walked.waiting}

    def resume(self) -> list[str] | None:
        """What the next hello names: the calls held while away, answered ones too."""
        walked = self.walk()
        if not walked.away:
            return None
        answered = [c for kind, c in walked.held if kind == "answer"]
        return sorted({*walked.running, *walked.waiting, *answered})
