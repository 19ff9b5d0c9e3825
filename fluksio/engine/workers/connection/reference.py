"""The connection rules as a naive model: every answer recomputed from the whole history.

This is the specification of :class:`~.connection.ConnectionMachine` in executable form.
It keeps no state but the list of what happened; each question (the phase, a call's
fate, whether the worker answers, what it was told to cancel) is answered by reading that
list from the start, one rule per kind of event. The property tests
(``tests/test_connection_properties.py``) drive both with the same events and require the
same answers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from fluksio.engine.workers.connection.machine import ConnectionRules

__all__ = ["Happened", "ReferenceConnection"]


@dataclass(frozen=True)
class Happened:
    """One thing that happened: ``what`` names it; the other fields are its details."""

    what: str
    call: str = ""
    now: float = 0.0
    limit: float = 0.0
    last: bool = False
    kind: str = ""
    """A timer's kind, the error kind a close fails calls as, or a frame's (``started``)."""
    socket: int = 0
    resume: tuple[str, ...] = ()
    adopted: tuple[str, ...] = ()
    """At a welcome: the calls named in ``resume`` that a restarted engine takes over."""

    def takes_on(self, call: str) -> bool:
        """Whether this puts ``call`` in flight: it is sent, or adopted at the welcome."""
        return (self.what == "send" and self.call == call) or (
            self.what == "welcomed" and call in self.adopted
        )


HEARING = {"heard", "frame", "oversized", "back"}
"""What counts as hearing from the worker."""


@dataclass
class ReferenceConnection:
    relayed: bool
    attached_at: float
    rules: ConnectionRules
    pipelined: bool = False
    history: list[Happened] = field(default_factory=list)

    def record(self, happened: Happened) -> None:
        self.history.append(happened)
        self._cache_clear()

    def _cache_clear(self) -> None:
        self.phase.cache_clear()
        self.fate.cache_clear()

    def __hash__(self) -> int:
        return id(self)

    # -- questions ---------------------------------------------------------------------

    @functools.cache  # noqa: B019 -- cleared at each event; the model is short-lived
    def phase(self, upto: int | None = None) -> str:
        """The phase after the first ``upto`` events (all of them by default)."""
        phase, socket = "attached", 0
        for index, event in enumerate(self.history[:upto]):
            if event.what == "close" or self._silent_at(index):
                if phase == "attached":
                    phase = "closing"
                elif phase == "away":
                    phase = "gone"
            elif event.what == "socket_end" and event.socket == socket:
                if phase == "attached" and self.relayed and self.live(index):
                    phase = "away"
                elif phase in ("attached", "closing"):
                    phase = "gone"
            elif event.what == "back":
                phase, socket = "attached", socket + 1
        return phase

    def live(self, upto: int | None = None) -> list[str]:
        """The calls sent and not yet answered, failed or dropped after ``upto`` events."""
        end = len(self.history) if upto is None else upto
        taken_on = [
            call
            for event in self.history[:end]
            for call in (event.adopted if event.what == "welcomed" else (event.call,))
            if event.takes_on(call)
        ]
        return [call for call in taken_on if self.fate(call, end)[0] == "live"]

    @functools.cache  # noqa: B019 -- as above
    def fate(self, call: str, upto: int | None = None) -> tuple[str, str]:
        """What became of ``call``: ``live``, ``answered``, ``dropped`` (its owner let go)
        or ``failed`` with an error kind."""
        end = len(self.history) if upto is None else upto
        sent = self._sent(call)
        refused = {"closing": "WorkerGone", "gone": "NotTaken", "away": "NotTaken"}
        if self.phase(sent) in refused:
            return ("failed", refused[self.phase(sent)])
        for index in range(sent + 1, end):
            decided = self._decides(call, sent, index)
            if decided is not None:
                return decided
        return ("live", "")

    def _decides(self, call: str, sent: int, index: int) -> tuple[str, str] | None:
        """What event ``index`` does to ``call``, live until then, if anything: the first
        rule that holds, in the order the machine would meet them."""
        event = self.history[index]
        mine = event.call == call
        untaken = not self._heard_between(sent, index) and not self.relayed
        ending = self.phase(index) in ("closing", "gone")
        started = (
            not self.pipelined
            or self.history[sent].what == "welcomed"
            or any(
                e.what == "frame" and e.call == call and e.kind == "started"
                for e in self.history[sent + 1 : index]
            )
        )
        socket_ends = event.what == "socket_end" and self._ends_current(index)
        rules = [
            (mine and event.what == "frame" and event.last, ("answered", "")),
            (mine and event.what == "ended", ("dropped", "")),
            (mine and event.what == "oversized", ("failed", "FrameTooLarge")),
            (mine and event.what == "send_failed", ("failed", "WorkerGone")),
            (mine and event.what == "timer" and event.kind == "limit", ("failed", "NodeLimit")),
            (
                mine and event.what == "timer" and event.kind == "take" and untaken,
                ("failed", "NotTaken"),
            ),
            (event.what == "back" and call not in event.resume, ("failed", "NotTaken")),
            # A call sent ahead that never said it started, when the worker was heard to
            # the end (not closed for its silence): it never will, so back in line.
            (event.what == "close" and not ending and not started, ("failed", "NotTaken")),
            (event.what == "close" and not ending, ("failed", event.kind)),
            (self._silent_at(index) and not ending, ("failed", "WorkerGone")),
            (socket_ends and (ending or not self.relayed) and not started, ("failed", "NotTaken")),
            (socket_ends and (ending or not self.relayed), ("failed", "WorkerGone")),
        ]
        return next((fate for holds, fate in rules if holds), None)

    def answering(self) -> bool:
        """Whether the worker answers, as the scheduler was last told."""
        answering = True
        for index, event in enumerate(self.history):
            phase = self.phase(index)
            if event.what == "check" and phase != "gone":
                quiet_s = event.now - self._last_seen(index)
                answering = (
                    phase != "away"
                    and not self._stalled(index)
                    and quiet_s <= self.rules.answer_within_s
                )
            elif self._untaken(index) or self._goes_away(index):
                answering = False
            elif event.what == "back":
                answering = True
        return answering

    def cancelled(self) -> list[str]:
        """Every call the worker was told to drop, in order."""
        told: list[str] = []
        for index, event in enumerate(self.history):
            if event.what == "welcomed":
                told += [c for c in event.resume if c not in event.adopted]
            elif event.what in ("timer", "oversized") and self._was_live(event.call, index):
                stopped = event.what == "oversized" or event.kind == "limit"
                if stopped or (self._untaken(index) and not self.relayed):
                    told.append(event.call)
            elif event.what == "back":
                told += sorted(set(event.resume) - set(self.live(index)))
        return told

    # -- helpers -----------------------------------------------------------------------

    def _sent(self, call: str) -> int:
        return next(i for i, e in enumerate(self.history) if e.takes_on(call))

    def _goes_away(self, index: int) -> bool:
        away = self.phase(index) != "away" and self.phase(index + 1) == "away"
        return self.history[index].what == "socket_end" and away

    def _was_live(self, call: str, upto: int) -> bool:
        """Whether ``call`` was sent to it and live after the first ``upto`` events."""
        sent = any(e.takes_on(call) for e in self.history[:upto])
        return sent and self.fate(call, upto)[0] == "live"

    def _last_seen(self, upto: int) -> float:
        heard = [e.now for e in self.history[:upto] if e.what in HEARING]
        return heard[-1] if heard else self.attached_at

    def _heard_between(self, after: int, before: int) -> bool:
        return any(e.what in HEARING for e in self.history[after + 1 : before])

    def _untaken(self, index: int) -> bool:
        """Whether event ``index`` is a take timer of a live call nothing was heard since."""
        event = self.history[index]
        if event.what != "timer" or event.kind != "take":
            return False
        if not self._was_live(event.call, index):
            return False
        return not self._heard_between(self._sent(event.call), index)

    def _stalled(self, upto: int) -> bool:
        """A call it never took, and nothing heard from it since."""
        untaken = [i for i in range(upto) if self._untaken(i)]
        return bool(untaken) and not self._heard_between(untaken[-1], upto)

    def _silent_at(self, index: int) -> bool:
        """Whether event ``index`` is the watcher finding it silent past the 90-second rule."""
        event = self.history[index]
        if event.what != "check" or self.phase(index) == "gone":
            return False
        return event.now - self._last_seen(index) > self.rules.gone_after_s

    def _ends_current(self, index: int) -> bool:
        """Whether event ``index`` ends the socket the worker is on, while not away."""
        sockets = sum(1 for e in self.history[:index] if e.what == "back")
        event = self.history[index]
        return event.socket == sockets and self.phase(index) in ("attached", "closing")
