"""What the agent's machine decides, carried out: calls run in their slots through the
launcher, their events, lines and answers sent on the socket of the moment, pings, the word
that a call sent ahead is taken, and what a welcome sets up.

The session (:mod:`~fluksio.agent.session`) owns the connection and hands the machine what
the engine says; a :class:`Carrier` owns the calls' tasks and everything that goes out.
With no socket (the engine away) a frame is not sent: the machine holds it already.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from typing import assert_never

import aiohttp

from fluksio.agent.attaching import AgentConfig, offered_artifacts
from fluksio.agent.cache_report import CacheReport
from fluksio.agent.calls import EndedBy
from fluksio.agent.clock import Clock
from fluksio.agent.launcher import Launcher
from fluksio.agent.machine.agent_machine import (
    AgentEffect,
    AgentMachine,
    Away,
    GiveUp,
    Kill,
    Ping,
    Prefetch,
    Send,
    Start,
    Taken,
    Welcome,
)
from fluksio.agent.prefetch import Prefetches
from fluksio.agent.protocol.frames import (
    AnswerFrame,
    CacheFrame,
    ErrorRecord,
    LogFrame,
    ProgressFrame,
    RunFrame,
    StoppingFrame,
    WelcomeFrame,
    encode,
)
from fluksio.agent.protocol.outcome import ErrorKind, error_record
from fluksio.agent.reporting import answer_of
from fluksio.agent.shared_store import shared_store_env
from fluksio.agent.taken import TakenWords

__all__ = ["Carrier"]

log = logging.getLogger("fluksio.worker")


class Carrier:
    def __init__(
        self, config: AgentConfig, launcher: Launcher, machine: AgentMachine, clock: Clock
    ) -> None:
        self.config = config
        self.launcher = launcher
        self.machine = machine
        self._clock = clock
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        """The engine's socket of the moment; None while it is away."""
        self.idle_since = clock.monotonic()
        """When the last call ended (for ``--max-idle``)."""
        self._calls: dict[str, asyncio.Task[None]] = {}
        """The running calls' tasks."""
        self._specs: dict[str, RunFrame] = {}
        """The calls the machine holds (running or waiting for a slot), as sent."""
        self._session_env: dict[str, str] = {}
        self._prefetches = Prefetches()
        containers = launcher.containers
        self._cache = CacheReport(
            clock,
            {**os.environ, **config.extra_env},
            images=list if containers is None else containers.runtime.held,
        )
        self._tells_cache = False
        """The engine takes reports of what the artifact cache holds."""
        self._taken = TakenWords(clock)
        self._sending: set[asyncio.Task[None]] = set()
        """Words of calls taken, said later unless another frame says it first."""
        self._interrupted: dict[str, str] = {}
        """Calls stopped because this worker was told to stop: why, as their answer says."""
        self._stopping: str | None = None
        """Why this worker was told to stop, once it was: it takes no more calls."""
        self._tells_stopping = False
        """The engine takes word that this worker is stopping."""

    def running(self) -> list[str]:
        """The calls running now, in their slots."""
        return list(self._calls)

    async def _tell_stopping(self) -> None:
        """Tell the engine this worker stopping (if it takes the word): it then sends
        nothing more, so no call comes only to be refused."""
        if self._tells_stopping and self._stopping is not None:
            await self.send_now(StoppingFrame(reason=self._stopping))

    async def stopping(self, why: str) -> list[str]:
        """Told to stop: the engine told, then every running call given its notice (see
        :meth:`give_notice`). Those."""
        noticed = self.give_notice(why)
        await self._tell_stopping()
        return noticed

    def give_notice(self, why: str) -> list[str]:
        """This worker was told to stop (``why``): a call sent from now on is answered that
        it was never taken, and every running call gets its notice signal. Those. One that
        fails from now on is answered ``Interrupted``: a batch system signals every process
        of the job it stops, the calls' too, and that is not their doing."""
        self._stopping = why
        for call_id in self._calls:
            self._interrupted[call_id] = why
            self.launcher.notify(call_id)
        return list(self._calls)

    def interrupt(self, why: str) -> list[str]:
        """Every call still running is stopped, its whole tree, and answered
        ``Interrupted`` (not its doing: the engine runs it again elsewhere). Those."""
        self._stopping = why
        for call_id in self._calls:
            self._interrupted[call_id] = why
            self.launcher.cancel(call_id, reason=EndedBy.INTERRUPTED)
        return list(self._calls)

    # -- what the engine said ------------------------------------------------------------

    async def welcomed(self, welcome: Welcome, reply: WelcomeFrame) -> None:
        """A welcome: what it offers taken up, what was held sent first."""
        self._tells_cache = welcome.cache and self.config.settings.report_cache
        self._tells_stopping = welcome.stopping
        if self._stopping is not None:
            await self._tell_stopping()  # told to stop while away: said on the way back
        self._cache.reset()
        self._taken.take_s = welcome.take_s
        await self.carry_out_dropping(self.machine.welcomed(welcome))  # held first
        store = reply.store
        self._session_env = shared_store_env(store) if self.config.settings.shares_store else {}
        if self._session_env:
            log.info("this host shares the engine's artifact store: calls use it directly")
        self._session_env.update(offered_artifacts(self.config, reply.artifacts))
        if self._tells_cache:
            await self._cache.tell(self.send_now)

    async def take(self, frame: RunFrame) -> None:
        """A run frame: the call, as it will run, for the machine to start or keep; once
        told to stop, none: it goes back in line, no attempt spent."""
        if self._stopping is not None:
            said = f"its worker was {self._stopping} before it started the call"
            refused = ErrorRecord(**error_record(ErrorKind.NOT_TAKEN, said))
            await self.send_now(AnswerFrame(call_id=frame.call_id, ok=False, error=refused))
            return
        # What this worker adds to every call's environment, under what the engine sent.
        env = {**self.config.extra_env, **self._session_env, **frame.env}
        self._specs.setdefault(frame.call_id, dataclasses.replace(frame, env=env))
        await self.carry_out(self.machine.run(frame.call_id))

    # -- carrying the machine's effects out ---------------------------------------------

    async def carry_out(self, effects: list[AgentEffect]) -> bool:
        """Carry ``effects`` out in order; True when the engine was given up on."""
        for effect in effects:
            # Every effect has its case: one without is a type error (assert_never).
            match effect:
                case Send():
                    await self._send_call_frame(effect.frame)
                case Start():
                    self._run_in_slot(effect.call_id)
                case Kill():
                    self.launcher.cancel(effect.call_id)
                case Taken():
                    self._say_taken(effect.call_id)
                case Prefetch():
                    self._prefetches.start(self._specs[effect.call_id])
                case Ping():
                    await self._ping_now(effect.payload)
                case Away():
                    self._kept(effect)
                case GiveUp():
                    log.error(
                        "the engine at %s has not come back for %g s (--engine-away-s):"
                        " stopping %d call(s) and exiting",
                        self.config.url.websocket,
                        self.config.settings.engine_away(),
                        effect.stopped,
                    )
                    return True
                case _:
                    assert_never(effect)
        return False

    async def carry_out_dropping(self, effects: list[AgentEffect]) -> bool:
        """Carry out the effects of an input that may drop calls never started (a cancel,
        a welcome, a drop, the engine given up): their specs go too. Not after the rest:
        a call's frames are the hot path."""
        gave_up = await self.carry_out(effects)
        held = set(self.machine.calls())
        self._specs = {c: spec for c, spec in self._specs.items() if c in held}
        return gave_up

    def _run_in_slot(self, call_id: str) -> None:
        spec = self._specs[call_id]
        task = asyncio.get_running_loop().create_task(self._call(spec))
        self._calls[call_id] = task
        task.add_done_callback(lambda _t: self._ended(call_id))

    async def _call(self, spec: RunFrame) -> None:
        """Run a call in its slot; its events and lines go out as they come, its answer
        after them."""
        sending: set[asyncio.Task[None]] = set()
        live_logs = self.machine.welcome.logs

        def on_event(frame: ProgressFrame | LogFrame) -> None:
            if isinstance(frame, LogFrame) and not live_logs:
                return  # an engine that did not offer them: the answer's logs only
            task = asyncio.get_running_loop().create_task(self._deliver(frame))
            sending.add(task)
            task.add_done_callback(sending.discard)

        outcome = await self.launcher.run(spec, on_event)
        why = self._interrupted.pop(spec.call_id, None)
        if why is not None and not outcome.ok and outcome.checkpoint is None:
            outcome = dataclasses.replace(outcome, error=error_record(ErrorKind.INTERRUPTED, why))
        if sending:  # its last lines and events go before its answer, which ends it
            await asyncio.gather(*sending)
        await self.carry_out(self.machine.ended(answer_of(spec.call_id, outcome)))
        if self._tells_cache:  # what it fetched may be worth placing calls by
            self._cache.changed(self.send_now)

    def _ended(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        self._specs.pop(call_id, None)
        if self.machine.idle():
            self.idle_since = self._clock.monotonic()

    def _say_taken(self, call_id: str) -> None:
        taken = ProgressFrame(call_id=call_id, event="heartbeat")

        async def say() -> None:
            ws = self.ws
            if ws is not None and not ws.closed:
                await self.send(ws, taken)

        task = asyncio.get_running_loop().create_task(
            self._taken.say(say, lambda: call_id in self._specs)
        )
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def _kept(self, away: Away) -> None:
        limit = self.config.settings.engine_away()
        log.warning(
            "the connection to the engine ended (%s): keeping %d call(s)%s",
            "it is going away" if away.going_away else "dropped",
            away.kept,
            f" for up to {limit:g} s (--engine-away-s)" if limit else "",
        )

    # -- what goes out -------------------------------------------------------------------

    async def _deliver(self, frame: ProgressFrame | LogFrame) -> None:
        await self.carry_out(self.machine.deliver(frame))

    async def _send_call_frame(self, frame: ProgressFrame | LogFrame | AnswerFrame) -> None:
        ws = self.ws
        # A socket that just closed (the machine hears of it next) takes nothing; an answer
        # is kept unconfirmed all the same, so the drop holds it for the next engine.
        size = await self.send(ws, frame) if ws is not None and not ws.closed else 0
        if isinstance(frame, AnswerFrame):
            await self.carry_out(self.machine.answer_sent(frame, size))

    async def _ping_now(self, payload: bytes) -> None:
        ws = self.ws
        if ws is not None and not ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.ping(payload)

    async def send_now(self, frame: CacheFrame | AnswerFrame | StoppingFrame) -> None:
        ws = self.ws
        if ws is not None and not ws.closed:
            await self.send(ws, frame)

    async def send(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        frame: ProgressFrame | LogFrame | AnswerFrame | CacheFrame | StoppingFrame,
    ) -> int:
        """Send ``frame``; how long it was."""
        self._taken.said += 1
        text = encode(frame)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_str(text)
        return len(text)
