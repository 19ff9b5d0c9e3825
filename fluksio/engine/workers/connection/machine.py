"""One worker's connection as a pure state machine: what happened, with ``now``, in; what
to do, out.

The third machine beside the runs' and provisioning's. A connection is *attached* from
its welcome; *closing* once this side decided to end it (superseded, silent, revoked,
drained, flooding, a malformed frame: its calls fail at once, with that reason);
*away* when the socket of a relayed worker with calls in flight dropped without this side
closing it (its calls are held, nothing new is given it); *gone* at the end. An away
worker is *back* when it attaches again naming the calls it holds.

Each input is a method named for what happened (a call was sent, anything was heard, an
answer or another frame of a call came, a timer a call set went off, the watcher looked,
the socket ended, the worker came back, this side closed it) and returns effects its
owner, :class:`~fluksio.engine.workers.session.WorkerSession`, carries out in order (they
are declared in :mod:`~fluksio.engine.workers.connection.effects`):

- :class:`Fail` a call with an error record, :class:`Cancel` it on the worker;
- :class:`Wake` me after a delay about one call (its take or limit timer);
- :class:`Ping` the worker (the published agent says nothing when it takes a call);
- :class:`NotTaking`: a call was sent and nothing came since (logged);
- :class:`Answering`: the worker answers, or stopped (the scheduler pauses its place);
- :class:`CloseSocket` with a code and a reason; :class:`Away`; :class:`Gone`;
- :class:`Unknown`: a frame named a call not in flight here (logged, the first few).

No clock, no I/O: ``now`` comes with each input. The rules it keeps are stated once more,
naively, in :mod:`fluksio.engine.workers.connection.reference`; the property tests
(``tests/test_connection_properties.py``) hold the two to the same answers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Literal

from fluksio.agent.protocol.frames import CONTROL_FRAME_BYTES
from fluksio.agent.protocol.outcome import ErrorKind, error_record, limit_error
from fluksio.engine.workers.connection.effects import (
    Answering,
    Away,
    Cancel,
    CloseSocket,
    ConnectionEffect,
    Fail,
    Gone,
    NotTaking,
    Ping,
    TimerKind,
    Unknown,
    Wake,
)

__all__ = ["ConnectionMachine", "ConnectionRules", "Phase", "unsigned_labels"]

Phase = Literal["attached", "closing", "away", "gone"]
WENT_AWAY = "worker went away mid-call"
CLOSED_IDLE = "the worker closed its connection with no call in flight (idle, or stopped)"
UNKNOWN_FRAMES_LOGGED = 10
LIMIT_BACKSTOP_S = 10.0
"""How long after a call's ``limit`` and the agent's grace the engine stops waiting for our
agent to stop it (it would have answered by then, unless something is wrong there)."""


@dataclass(frozen=True)
class ConnectionRules:
    """The engine's settings a connection decides by."""

    take_within_s: float = 15.0
    """A call sent with nothing at all heard since, this long, was never taken."""
    answer_within_s: float = 22.5
    """Heard within this long, a worker answers (one and a half ping intervals)."""
    gone_after_s: float = 90.0
    """Nothing heard this long: the spec's 90-second rule ends the connection."""
    limit_backstop_s: float = 13.0
    """For our agent, which stops a call at its ``limit`` itself: how long past the limit
    the engine stops waiting for it to (its grace and a margin)."""


@dataclass
class _Call:
    heard_when_sent: int
    limit: float | None
    """The longest it may run (None: no bound)."""
    started: bool
    """It runs (or ran): said by a ``started`` event where the worker takes calls ahead;
    at once where it does not (a call sent starts when it arrives)."""


@dataclass
class ConnectionMachine:
    """The connection of one worker, from its welcome to its end.

    ``name``: the worker's, as its sentences say it; ``relayed``: its path passes a relay,
    so a dropped socket may not mean a dead worker; ``published``: the hello named no
    version (the published agent 0.1.6); ``attached_at``: when it was welcomed;
    ``pipelined``: it takes calls ahead of a free slot and says ``started`` as each starts
    (a call's limit counts from then, and one it never started goes back in line if the
    connection ends).
    """

    name: str
    relayed: bool
    published: bool
    attached_at: float
    rules: ConnectionRules = field(default_factory=ConnectionRules)
    pipelined: bool = False
    phase: Phase = "attached"
    last_seen: float = 0.0
    heard: int = 0
    """How many times anything came from it: what "heard since" counts, so that two things
    at one instant of the clock are still told apart."""
    not_taking_after: int | None = None
    """``heard`` when a call was sent that it never took: it answers again once heard after."""
    answering: bool = True
    closed_reason: str | None = None
    socket: int = 0
    """Which socket carries it: each return from away is a new one; a socket's end that
    is not the current one's (it was replaced) changes nothing."""
    unknown_frames: int = 0
    _calls: dict[str, _Call] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last_seen = self.attached_at

    # -- questions -------------------------------------------------------------------------

    def in_flight(self) -> list[str]:
        """The calls sent and not yet answered or failed, oldest first."""
        return list(self._calls)

    def expects(self, call_id: str) -> bool:
        return call_id in self._calls

    def sent_ahead(self) -> int:
        """How many of its calls it holds ahead of a free slot, not yet started."""
        return sum(1 for call in self._calls.values() if not call.started)

    # -- inputs ----------------------------------------------------------------------------

    def send(self, call_id: str, limit: float | None, now: float) -> list[ConnectionEffect]:
        """A call is to go to the worker: refused at once if it cannot, else expected."""
        if self.phase == "gone":
            # Placed while its socket was ending, before the scheduler heard it was gone:
            # it never reached the worker, so back in line (no attempt spent).
            said = f"worker {self.name} was gone before the call reached it; queued again"
            return [Fail(call_id, error_record(ErrorKind.NOT_TAKEN, said))]
        if self.phase == "closing":
            reason = self.closed_reason or WENT_AWAY
            return [Fail(call_id, error_record(ErrorKind.WORKER_GONE, reason))]
        if self.phase == "away":
            said = f"worker {self.name} is away (its connection dropped); queued again"
            return [Fail(call_id, error_record(ErrorKind.NOT_TAKEN, said))]
        self._calls[call_id] = _Call(self.heard, limit, started=not self.pipelined)
        effects: list[ConnectionEffect] = [Wake(call_id, "take", self.rules.take_within_s)]
        if not self.pipelined:
            effects += self._limit_timer(call_id)
        if self.published:
            effects.append(Ping())
        return effects

    def send_failed(self, call_id: str, why: str) -> list[ConnectionEffect]:
        """The run frame could not be written: the socket is going."""
        if self._calls.pop(call_id, None) is None:
            return []
        error = error_record(ErrorKind.WORKER_GONE, f"{WENT_AWAY} ({why})")
        return [Fail(call_id, error)]

    def ended(self, call_id: str) -> None:
        """The call's owner stopped waiting for it (it has its outcome)."""
        self._calls.pop(call_id, None)

    def heard_from(self, now: float) -> list[ConnectionEffect]:
        """Anything came from the worker: a frame, a pong."""
        self.last_seen = now
        self.heard += 1
        return []

    def frame(self, call_id: str, what: str, now: float, *, last: bool) -> list[ConnectionEffect]:
        """A frame of a call came (``last``: its answer). Nothing to do for a call in flight
        (its owner delivers the frame); one not in flight is :class:`Unknown`."""
        self.heard_from(now)
        call = self._calls.get(call_id)
        if call is None:
            self.unknown_frames += 1
            return [Unknown(call_id, what, self.unknown_frames)]
        if last:
            del self._calls[call_id]
        elif what == "started" and not call.started:
            call.started = True
            return self._limit_timer(call_id)
        return []

    def oversized(self, call_id: str, what: str, size: int, now: float) -> list[ConnectionEffect]:
        """A frame of a call, not its answer, larger than the wire allows: the call fails
        as ``FrameTooLarge`` and is stopped on the worker (the worker and its other calls
        go on)."""
        effects = self.frame(call_id, f"{what} of {size} bytes, over the bound", now, last=False)
        if effects:
            return effects
        del self._calls[call_id]
        said = (
            f"the call's {what} frame was {size} bytes; frames other than its answer are at"
            f" most {CONTROL_FRAME_BYTES} bytes: save large data as an artifact"
        )
        return [Cancel(call_id), Fail(call_id, error_record(ErrorKind.FRAME_TOO_LARGE, said))]

    def timer(self, kind: TimerKind, call_id: str) -> list[ConnectionEffect]:
        """A timer a call set with :class:`Wake` went off."""
        call = self._calls.get(call_id)
        if call is None:
            return []
        if kind == "limit" and call.limit is not None:
            del self._calls[call_id]
            return [Cancel(call_id), Fail(call_id, limit_error(call.limit))]
        if self.heard > call.heard_when_sent:
            return []
        # Nothing at all came since it was sent: it froze before it could take the call.
        self.not_taking_after = call.heard_when_sent
        effects: list[ConnectionEffect] = [NotTaking(call_id), *self._answers(False)]
        if not requeues_untaken(self.relayed):
            return effects  # held, as an away worker's calls are
        del self._calls[call_id]
        said = (
            f"worker {self.name} sent nothing for {self.rules.take_within_s:g} s after it was"
            " sent the call, so never took it; queued again for another worker"
        )
        fail = Fail(call_id, error_record(ErrorKind.NOT_TAKEN, said))
        return [*effects, Cancel(call_id), fail]

    def check(self, now: float, *, busy: bool) -> list[ConnectionEffect]:
        """The watcher's look: whether it answers, and the 90-second rule. ``busy``: calls
        are placed on it (the dispatcher's count, which includes those not yet sent)."""
        if self.phase == "gone":
            return []
        silent_s = now - self.last_seen
        stalled = self.not_taking_after is not None and self.heard <= self.not_taking_after
        answering = self.phase != "away" and not stalled and silent_s <= self.rules.answer_within_s
        effects = self._answers(answering)
        if silent_s > self.rules.gone_after_s:
            silent = f"no message from the worker for {self.rules.gone_after_s:g} s"
            reason = (
                f"{silent} while it was executing; its calls failed as gone"
                if busy
                else f"{silent}; disconnected"
            )
            # Its path may be what went silent: the worker may still run its calls.
            effects += self.close(reason, heard_to_the_end=False, lingers=True)
        return effects

    def close(
        self,
        reason: str,
        code: int = 1008,
        kind: ErrorKind = ErrorKind.WORKER_GONE,
        *,
        heard_to_the_end: bool = True,
        lingers: bool = False,
    ) -> list[ConnectionEffect]:
        """This side ends the connection, saying why: its calls fail with that reason, as
        ``kind``. An away worker is gone at once; an attached one once its socket ends.
        ``heard_to_the_end``: every frame the worker sent has come (it is not closed for
        its silence), so a call sent ahead that it never said started never will.
        ``lingers``: the worker may not hear the close (its path is silent) and keep its
        calls running."""
        if self.phase in ("closing", "gone"):
            return []
        self.closed_reason = reason
        error = error_record(kind, reason)
        effects: list[ConnectionEffect] = self._fail_all(error, heard_to_the_end, lingers)
        if self.phase == "away":
            self.phase = "gone"
            return [*effects, Gone(reason)]
        self.phase = "closing"
        return [*effects, CloseSocket(reason, code)]

    def socket_ended(self, socket: int) -> list[ConnectionEffect]:
        """Socket ``socket`` ended (the worker closed it, the network did, or this side)."""
        if socket != self.socket or self.phase in ("away", "gone"):
            return []
        if self.phase == "attached" and self.relayed and self._calls:
            # Its relay dropped, not the worker: its calls wait for it (the 90-s rule).
            self.phase = "away"
            return [*self._answers(False), Away()]
        self.closed_reason = self.closed_reason or (WENT_AWAY if self._calls else CLOSED_IDLE)
        # A closed connection: the worker (or its host) went, as the spec says, and with
        # it its calls (a path that closed instead is told to drop them once back).
        effects = self._fail_all(error_record(ErrorKind.WORKER_GONE, WENT_AWAY), True)
        self.phase = "gone"
        return [*effects, Gone(self.closed_reason)]

    def welcomed(self, resume: list[str], adopted: Collection[str] = ()) -> list[ConnectionEffect]:
        """A new connection was welcomed; ``resume``: calls it holds from a connection
        gone (the engine restarted, or ended them: the 90-second rule, a drop).
        ``adopted``: those of them the engine, restarted, takes over: in flight here from
        now on, as started (their limits are our agent's to keep, from their start). It
        is told to drop the others, so none runs on unseen."""
        for call_id in adopted:
            self._calls[call_id] = _Call(self.heard, 0.0, started=True)
        return [Cancel(call_id) for call_id in resume if call_id not in adopted]

    def came_back(self, resume: list[str], now: float) -> list[ConnectionEffect]:
        """The away worker attached again over a new socket, naming the calls it holds.

        Calls it does not name never reached it (it names every call it started until the
        engine has its answer), so they go back in line, as never taken; the ones it names
        that are not in flight here any more (ended or cancelled meanwhile) it is told to
        drop.
        """
        if self.phase != "away":
            raise ValueError(f"a worker comes back only from away, not {self.phase}")
        held = set(resume)
        lost = error_record(
            ErrorKind.NOT_TAKEN,
            f"the run frame was lost with worker {self.name}'s relay path (it came back without"
            " the call, so never started it); queued again",
        )
        effects: list[ConnectionEffect] = [
            Fail(call_id, lost) for call_id in self._calls if call_id not in held
        ]
        self._calls = {c: call for c, call in self._calls.items() if c in held}
        effects += [Cancel(call_id) for call_id in sorted(held - set(self._calls))]
        self.phase, self.socket, self.not_taking_after = "attached", self.socket + 1, None
        self.heard_from(now)
        return [*effects, *self._answers(True)]

    # -- helpers ---------------------------------------------------------------------------

    def _answers(self, answering: bool) -> list[ConnectionEffect]:
        if answering == self.answering:
            return []
        self.answering = answering
        return [Answering(answering)]

    def _fail_all(
        self, error: dict[str, str], heard_to_the_end: bool, lingers: bool = False
    ) -> list[ConnectionEffect]:
        """Every call fails with ``error`` (``lingers``: its worker may run it still), but
        those sent ahead that never started, where all the worker sent has come: they go
        back in line (their worker drops what it had not started when its connection
        ends, so none starts twice)."""
        never_started = error_record(
            ErrorKind.NOT_TAKEN,
            f"worker {self.name}'s connection ended before the call, sent ahead, started;"
            " queued again",
        )
        failed: list[ConnectionEffect] = [
            Fail(call_id, error, lingers)
            if call.started or not heard_to_the_end
            else Fail(call_id, never_started)
            for call_id, call in self._calls.items()
        ]
        self._calls.clear()
        return failed

    def _limit_timer(self, call_id: str) -> list[ConnectionEffect]:
        """The call's limit, from now (when it starts), with our agent's grace beyond."""
        limit = self._calls[call_id].limit
        if limit is None or limit <= 0:
            return []
        late = 0.0 if self.published else self.rules.limit_backstop_s
        return [Wake(call_id, "limit", limit + late)]


def requeues_untaken(relayed: bool) -> bool:
    """Whether a call this worker has not been heard from since it was sent goes back in
    line at ``take_within_s`` (as ``NotTaken``, for another worker).

    The rule it keeps: **no call starts twice unless its node opted into retries.** A call
    goes elsewhere only once the first worker's copy is sure never to start: our agent
    attached directly reads the ``cancel`` sent with the requeue on the one TCP stream the
    run frame came by, and never starts a call cancelled before it started; if that stream
    dies instead, it stops every call it had. A relayed worker's silence may be its relay's
    path, not the worker: it may be running the call and come back naming it, so its calls
    are held (no new ones are given it) until it is heard, comes back, or the 90-second
    rule fails them as ``WorkerGone``. Two cases remain where a first copy may start, both
    documented in docs/workers.md: the published agent 0.1.6 (it may start a call and kill
    it at once when the cancel behind it is read), and a direct worker whose network path
    goes silent without closing after the run frame reached it (its copy runs until the
    agent's own 90-s rule stops it).
    """
    return not relayed


def unsigned_labels(labels: list[str], signed: tuple[str, ...]) -> str | None:
    """Why a hello claiming ``labels`` is refused when its token signs ``signed``, if it is."""
    unsigned = sorted(set(labels) - set(signed))
    if not unsigned:
        return None
    said = ", ".join(signed) or "no labels"
    return (
        f"labels {', '.join(unsigned)} are not signed by this worker's token (it signs"
        f" {said}); mint a token with them or drop them from --labels"
    )
