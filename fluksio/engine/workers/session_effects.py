"""A worker session carries its connection machine's effects out: it fails and wakes the
calls waiting on it, writes cancels and pings, tells the registry of workers how the
connection stands, and closes the socket when the machine says so.

A part of :class:`~fluksio.engine.workers.session.WorkerSession`, which it reads as its
:class:`SessionSide`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, assert_never

from fluksio.agent.launcher import CallOutcome
from fluksio.agent.protocol.frames import CancelFrame, HelloFrame, LogFrame, ProgressFrame, encode
from fluksio.clock import Clock, Timer
from fluksio.engine.workers.connection import effects as connection_effects
from fluksio.engine.workers.connection.machine import UNKNOWN_FRAMES_LOGGED, ConnectionMachine
from fluksio.engine.workers.socket import CountedSocket
from fluksio.logs import get_logger

__all__ = ["CallEvent", "EventCallback", "Pending", "SentAhead", "SessionEffects", "SessionSide"]

log = get_logger("fluksio.engine.workers.session")


@dataclasses.dataclass(frozen=True)
class SentAhead:
    """(the engine's own word) The call went to a worker whose every slot is busy: it
    waits in that worker's line, which says when it starts (``started``)."""

    call_id: str


CallEvent = ProgressFrame | LogFrame | SentAhead
"""What a running call's executor tells as it runs: the worker's frames, as they came."""
EventCallback = Callable[[CallEvent], None]
KEPT_AT_MOST_S = 86_400.0
"""How long a worker that keeps its calls for ever (``--engine-away-s 0``) is taken to
keep a lost one: a day, then it may run elsewhere (sooner once the worker is back)."""


@dataclasses.dataclass
class Pending:
    """A call in flight on the worker: what its executor awaits, where its events go,
    and the timers the machine asked for it."""

    future: asyncio.Future[CallOutcome]
    on_event: EventCallback
    timers: list[Timer] = dataclasses.field(default_factory=list)


class SessionSide(Protocol):
    """What a session's effects read of their session (its socket changes as a relayed
    worker comes back on another)."""

    id: str
    name: str
    hello: HelloFrame
    ws: CountedSocket
    clock: Clock
    machine: ConnectionMachine

    def tell_link(self, effect: connection_effects.LinkNews) -> None:
        """Tell the engine's side how the connection stands."""
        ...


class SessionEffects:
    """A worker session's connection machine's effects, carried out; the calls in flight
    it fails and wakes are held here."""

    def __init__(self, session: SessionSide) -> None:
        self._session = session
        self.pending: dict[str, Pending] = {}
        """The calls in flight on the worker, by call id."""
        self.writes: set[asyncio.Task[None]] = set()
        """Frames being written, a task each."""

    async def carry_out(self, effects: list[connection_effects.ConnectionEffect]) -> None:
        closing = self.apply(effects)
        if closing is not None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._session.ws.close(
                    code=closing.code, message=closing.reason.encode()[:120]
                )
            log.info(
                "worker.closed",
                worker=self._session.name,
                worker_id=self._session.id,
                reason=closing.reason,
            )

    def apply(
        self, effects: list[connection_effects.ConnectionEffect]
    ) -> connection_effects.CloseSocket | None:
        """Carry out ``effects`` in order; a ``CloseSocket`` is returned, to be awaited."""
        closing = None
        for effect in effects:
            # Every effect has its case: one without is a type error (assert_never).
            match effect:
                case connection_effects.Fail():
                    self._fail(effect)
                case connection_effects.Cancel():
                    self.send_later(encode(CancelFrame(call_id=effect.call_id)))
                case connection_effects.Wake():
                    self._wake(effect)
                case connection_effects.Ping():
                    self.later(self._session.ws.ping())
                case connection_effects.NotTaking():
                    fields = {
                        "worker": self._session.name,
                        "worker_id": self._session.id,
                        "call_id": effect.call_id,
                    }
                    log.warning("worker.not_taking", **fields)
                case (
                    connection_effects.Answering()
                    | connection_effects.Away()
                    | connection_effects.Gone()
                ):
                    self._session.tell_link(effect)
                case connection_effects.CloseSocket():
                    closing = effect
                case connection_effects.Unknown():
                    self._unknown(effect)
                case _:
                    assert_never(effect)
        return closing

    def _fail(self, fail: connection_effects.Fail) -> None:
        pending = self.pending.get(fail.call_id)
        if pending is not None and not pending.future.done():
            until = self._lingers_until() if fail.lingers else None
            pending.future.set_result(CallOutcome(False, error=fail.error, may_run_until=until))

    def _lingers_until(self) -> float | None:
        """Until when our agent may still run a call lost with its connection: it gives
        a silent engine up after the engine's own rule, then keeps its calls for what its
        hello said (``keeps_s``; none said: for ever, so at most a day here). The
        published agent says nothing of it: None, as before."""
        if self._session.hello.version is None:
            return None
        keeps_s = (
            self._session.hello.keeps_s
            if self._session.hello.keeps_s is not None
            else KEPT_AT_MOST_S
        )
        return self._session.clock.now() + self._session.machine.rules.gone_after_s + keeps_s

    def _wake(self, wake: connection_effects.Wake) -> None:
        pending = self.pending.get(wake.call_id)
        if pending is None:
            return

        def fired() -> None:
            self.apply(self._session.machine.timer(wake.kind, wake.call_id))

        pending.timers.append(self._session.clock.call_later(wake.delay_s, fired))

    def _unknown(self, unknown: connection_effects.Unknown) -> None:
        """Late answers are normal after a limit; the first few are logged, so a worker
        cannot flood the log with them."""
        if unknown.seen <= UNKNOWN_FRAMES_LOGGED:
            log.warning(
                "worker.unknown_call",
                worker=self._session.name,
                worker_id=self._session.id,
                call_id=unknown.call_id[:64],
                frame=unknown.frame,
                seen=unknown.seen,
            )

    def send_later(self, text: str) -> None:
        if not self._session.ws.closed:
            self.later(self._session.ws.send_str(text))

    async def write(self, text: str) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self._session.ws.send_str(text)

    def later(self, write: Coroutine[Any, Any, None]) -> None:
        async def quietly() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await write

        task = asyncio.get_running_loop().create_task(quietly())
        self.writes.add(task)
        task.add_done_callback(self.writes.discard)
