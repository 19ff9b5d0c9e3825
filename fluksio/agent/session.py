"""The worker's side of the attach socket: the shell of :class:`~.machine.AgentMachine`.

One :class:`Agent` keeps one connection to the engine: it says hello, reads frames, and
carries out what its machine decides. Each ``run``/``compile`` frame is a call the
machine starts in a slot (through the launcher: a fresh process under ``--python``) or
keeps waiting for one; its events go back as they happen, its output lines too (in
batches, when the engine's welcome offers to take them), a heartbeat every
``heartbeat_s`` while it runs, and its answer, sent after all of those, ends it.

When the connection drops (no close frame: the engine died, or the path did), or the
engine closes it saying it is going away (a graceful stop, an upgrade), the calls go on,
their frames are held (:mod:`~fluksio.agent.held`), the next hello names them
(``resume``) and the held frames follow the welcome: a restarted engine adopts them, one
that lived through the drop (it failed them) tells the agent to drop them. Any other
close stops them. After ``--engine-away-s`` without getting back, the agent stops them
and exits 4. It reconnects with capped exponential backoff and jitter. An answer is
forgotten only once the engine's pong to a later ping says it is recorded
(:mod:`~fluksio.agent.unconfirmed`). A refusal (another protocol, a revoked or invalid
token, unsigned labels) is final: the agent says why and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
from typing import Any

import aiohttp

from fluksio.agent.attaching import (
    AgentConfig,
    Refused,
    connector_for,
    describe_failure,
    dial,
    hello_frame,
    offered_artifacts,
    reconnect_delay,
    untrusted,
)
from fluksio.agent.cache_report import CacheReport
from fluksio.agent.clock import SYSTEM_CLOCK, Clock
from fluksio.agent.frames import (
    AnswerFrame,
    CacheFrame,
    CancelFrame,
    LogFrame,
    ProgressFrame,
    RunFrame,
    encode,
    read_engine_frame,
)
from fluksio.agent.launcher import CallSpec, Launcher
from fluksio.agent.machine import (
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
from fluksio.agent.reporting import answer_of, event_of
from fluksio.agent.shared_store import shared_store_env
from fluksio.agent.taken import TakenWords

__all__ = ["Agent", "AgentConfig", "Refused"]

CLOSE_SUPERSEDED = 4409  # the engine replaced this session by a newer one of the same worker
CLOSE_DRAINED = 4010  # the worker's batch job ends too soon for more work: leave
EXIT_ENGINE_AWAY = 4  # the engine did not come back within --engine-away-s
log = logging.getLogger("fluksio.worker")
WELCOME_WITHIN_S = 30.0
"""How long the agent waits for the engine's welcome after its hello."""


class Agent:
    def __init__(
        self, config: AgentConfig, launcher: Launcher, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.config = config
        self.launcher = launcher
        self._clock = clock
        self.machine = AgentMachine(
            config.parallel,
            relayed=config.route is not None,
            engine_away_s=config.engine_away_s,
        )
        self._calls: dict[str, asyncio.Task[None]] = {}
        """The running calls' tasks."""
        self._specs: dict[str, CallSpec] = {}
        """The calls the machine holds (running or waiting for a slot), as sent."""
        self._idle_since = self._clock.monotonic()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._engine_closed = False
        """Whether the engine closed the last connection with a close frame (else the
        path dropped: aiohttp reports a bare end of stream as OK or as abnormal, by race)."""
        self._stop = asyncio.Event()
        self._session_env: dict[str, str] = {}
        self._prefetches = Prefetches()
        self._cache = CacheReport(clock, {**os.environ, **config.extra_env})
        self._tells_cache = False
        """The engine takes reports of what the artifact cache holds."""
        self._taken = TakenWords(clock)
        self._sending: set[asyncio.Task[None]] = set()
        """Words of calls taken, said later unless another frame says it first."""

    # -- the outer loop ----------------------------------------------------------------

    async def run(self) -> int:
        """Stay attached until refused (exit 3) or idle for ``--max-idle`` (exit 0)."""
        attempt = 0
        idle_watch = asyncio.get_running_loop().create_task(self._watch_idle())
        try:
            while not self._stop.is_set():
                if await self._carry_out_dropping(self.machine.check(self._clock.monotonic())):
                    return EXIT_ENGINE_AWAY
                welcomed = False
                try:
                    welcomed = await self._session()
                except Refused as refused:
                    log.error("refused by the engine: %s", refused)
                    return 3
                except aiohttp.ClientConnectorCertificateError as exc:
                    # Trying again cannot make a certificate trusted: say why, and stop.
                    log.error("%s", untrusted(exc))
                    return 3
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    log.warning(
                        "cannot reach the engine at %s: %s",
                        self.config.url.websocket,
                        describe_failure(exc),
                    )
                if self._stop.is_set():
                    break
                attempt = 0 if welcomed else attempt + 1
                draw = random.random()  # noqa: S311 - jitter, not security
                delay = reconnect_delay(attempt, self.config.backoff_max_s, draw)
                log.info("reconnecting in %.1f s", delay)
                with contextlib.suppress(TimeoutError):
                    async with self._clock.timeout(delay):
                        await self._stop.wait()
            return 0
        finally:
            idle_watch.cancel()

    async def _watch_idle(self) -> None:
        limit = self.config.max_idle_s
        if not limit:
            return
        while True:
            await self._clock.sleep(min(1.0, limit / 4))
            idle = self.machine.idle()
            if idle and self._clock.monotonic() - self._idle_since >= limit:
                log.info("idle for %g s: stopping", limit)
                self._stop.set()
                if self._ws is not None:
                    await self._ws.close()
                return

    # -- one connection ----------------------------------------------------------------

    async def _session(self) -> bool:
        """One connection, until it ends; True if the engine welcomed us."""
        async with aiohttp.ClientSession(connector=connector_for(self.config)) as http:
            ws = await dial(http, self.config)
            self._ws = ws
            try:
                reply = await self._welcomed(ws)
                log.info("attached to %s as %s", self.config.url.websocket, reply.get("name"))
                welcome = Welcome.read(reply)
                self._tells_cache = welcome.cache and self.config.report_cache
                self._cache.reset()
                self._taken.take_s = welcome.take_s
                await self._carry_out_dropping(self.machine.welcomed(welcome))  # held first
                self._session_env = (
                    shared_store_env(reply.get("store")) if self.config.use_shared_store else {}
                )
                if self._session_env:
                    log.info("this host shares the engine's artifact store: calls use it directly")
                self._session_env.update(offered_artifacts(self.config, reply.get("artifacts")))
                if self._tells_cache:
                    await self._cache.tell(self._send_now)
                heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(ws))
                pinger = asyncio.get_running_loop().create_task(self._ping(ws))
                try:
                    reason = await self._receive(ws)
                finally:
                    heartbeat.cancel()
                    pinger.cancel()
                    await self._carry_out_dropping(
                        self.machine.dropped(
                            closed_by_engine=self._engine_closed,
                            code=ws.close_code,
                            now=self._clock.monotonic(),
                        )
                    )
                if ws.close_code == CLOSE_DRAINED:
                    # Its job ends before any more work could finish: leave, so the job
                    # ends now and frees its allocation, instead of being killed later.
                    log.info("drained by the engine: %s", reason)
                    self._stop.set()
                    return True
                if ws.close_code == CLOSE_SUPERSEDED:
                    # Reconnecting would only push the newer session out in turn.
                    raise Refused(reason or "superseded by a newer connection of this worker")
                if reason:
                    log.warning("the engine closed the connection: %s", reason)
                return True
            finally:
                self._ws = None
                await ws.close()

    async def _welcomed(self, ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
        """Say hello; the engine's welcome, or :class:`Refused` saying why not."""
        hello = hello_frame(self.config, self.launcher, self.machine.resume())
        await ws.send_str(encode(hello))
        async with self._clock.timeout(WELCOME_WITHIN_S):
            first = await ws.receive()
        if first.type != aiohttp.WSMsgType.TEXT:
            raise aiohttp.ClientError(f"the engine closed the connection ({first.extra})")
        reply: dict[str, Any] = json.loads(first.data)
        if reply.get("op") == "refused":
            raise Refused(str(reply.get("reason", "no reason given")))
        if reply.get("op") != "welcome":
            raise Refused(f"the engine answered {reply.get('op')!r} instead of welcome")
        return reply

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Handle frames until the connection ends; returns the engine's reason, if any."""
        self._engine_closed = False
        while True:
            try:
                async with self._clock.timeout(self.config.gone_s):
                    message = await ws.receive()
            except TimeoutError:
                return f"no message from the engine for {self.config.gone_s:g} s"
            if message.type == aiohttp.WSMsgType.PING:
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.pong(message.data)
                continue
            if message.type == aiohttp.WSMsgType.PONG:
                self.machine.pong(message.data)
                continue
            if message.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.ERROR,
            ):
                self._engine_closed = message.type == aiohttp.WSMsgType.CLOSE
                return str(message.extra or "") if self._engine_closed else ""
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            try:
                frame = json.loads(message.data)
            except ValueError:
                log.warning("ignoring a frame that is not JSON")
                continue
            try:
                call = read_engine_frame(frame)
            except ValueError as exc:
                log.warning("ignoring a malformed frame: %s", exc)
                continue
            if isinstance(call, RunFrame):
                await self._take(call)
            elif isinstance(call, CancelFrame):
                await self._carry_out_dropping(self.machine.cancel(call.call_id))

    async def _take(self, frame: RunFrame) -> None:
        """A run frame: the call, as it will run, for the machine to start or keep."""
        spec = CallSpec(
            call_id=frame.call_id,
            source=frame.source,
            node=frame.node,
            flow=frame.flow,
            op=frame.op,
            kwargs=frame.kwargs,
            env={**self.config.extra_env, **self._session_env, **frame.env},
            timeout=frame.timeout,
            limit=frame.limit or 0.0,
        )
        self._specs.setdefault(frame.call_id, spec)
        await self._carry_out(self.machine.run(frame.call_id))

    def _ended(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        self._specs.pop(call_id, None)
        if self.machine.idle():
            self._idle_since = self._clock.monotonic()

    async def _call(self, spec: CallSpec) -> None:
        """Run a call in its slot; its events and lines go out as they come, its answer
        after them."""
        sending: set[asyncio.Task[None]] = set()
        live_logs = self.machine.welcome.logs

        def on_event(record: dict[str, Any]) -> None:
            if record.get("event") == "log" and not live_logs:
                return  # an engine that did not offer them: the answer's logs only
            task = asyncio.get_running_loop().create_task(
                self._deliver(event_of(spec.call_id, record))
            )
            sending.add(task)
            task.add_done_callback(sending.discard)

        outcome = await self.launcher.run(spec, on_event)
        if sending:  # its last lines and events go before its answer, which ends it
            await asyncio.gather(*sending)
        await self._carry_out(self.machine.ended(answer_of(spec.call_id, outcome)))
        if self._tells_cache:  # what it fetched may be worth placing calls by
            self._cache.changed(self._send_now)

    # -- carrying the machine's effects out ---------------------------------------------

    async def _carry_out(self, effects: list[AgentEffect]) -> bool:
        """Carry ``effects`` out in order; True when the engine was given up on."""
        for effect in effects:
            if isinstance(effect, Send):
                await self._send_call_frame(effect.frame)
            elif isinstance(effect, Start):
                self._run_in_slot(effect.call_id)
            elif isinstance(effect, Kill):
                self.launcher.cancel(effect.call_id)
            elif isinstance(effect, Taken):
                self._say_taken(effect.call_id)
            elif isinstance(effect, Prefetch):
                self._prefetches.start(self._specs[effect.call_id])
            elif isinstance(effect, Ping):
                await self._ping_now(effect.payload)
            elif isinstance(effect, Away):
                self._kept(effect)
            elif isinstance(effect, GiveUp):
                log.error(
                    "the engine at %s has not come back for %g s (--engine-away-s): stopping"
                    " %d call(s) and exiting",
                    self.config.url.websocket,
                    self.config.engine_away_s,
                    effect.stopped,
                )
                return True
        return False

    async def _carry_out_dropping(self, effects: list[AgentEffect]) -> bool:
        """Carry out the effects of an input that may drop calls never started (a cancel,
        a welcome, a drop, the engine given up): their specs go too. Not after the rest:
        a call's frames are the hot path."""
        gave_up = await self._carry_out(effects)
        held = set(self.machine.calls())
        self._specs = {c: spec for c, spec in self._specs.items() if c in held}
        return gave_up

    def _run_in_slot(self, call_id: str) -> None:
        spec = self._specs[call_id]
        task = asyncio.get_running_loop().create_task(self._call(spec))
        self._calls[call_id] = task
        task.add_done_callback(lambda _t: self._ended(call_id))

    def _say_taken(self, call_id: str) -> None:
        taken = ProgressFrame(call_id=call_id, event="heartbeat")

        async def say() -> None:
            ws = self._ws
            if ws is not None and not ws.closed:
                await self._send(ws, taken)

        task = asyncio.get_running_loop().create_task(
            self._taken.say(say, lambda: call_id in self._specs)
        )
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    def _kept(self, away: Away) -> None:
        limit = self.config.engine_away_s
        log.warning(
            "the connection to the engine ended (%s): keeping %d call(s)%s",
            "it is going away" if away.going_away else "dropped",
            away.kept,
            f" for up to {limit:g} s (--engine-away-s)" if limit else "",
        )

    async def _deliver(self, frame: ProgressFrame | LogFrame) -> None:
        await self._carry_out(self.machine.deliver(frame))

    async def _send_call_frame(self, frame: ProgressFrame | LogFrame | AnswerFrame) -> None:
        ws = self._ws
        # A socket that just closed (the machine hears of it next) takes nothing; an answer
        # is kept unconfirmed all the same, so the drop holds it for the next engine.
        size = await self._send(ws, frame) if ws is not None and not ws.closed else 0
        if isinstance(frame, AnswerFrame):
            await self._carry_out(self.machine.answer_sent(frame, size))

    async def _ping_now(self, payload: bytes) -> None:
        ws = self._ws
        if ws is not None and not ws.closed:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.ping(payload)

    async def _send_now(self, frame: CacheFrame) -> None:
        ws = self._ws
        if ws is not None and not ws.closed:
            await self._send(ws, frame)

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while not ws.closed:
            await self._clock.sleep(self.config.ping_s)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.ping(self.machine.ping().payload)

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            await self._clock.sleep(self.config.heartbeat_s)
            for call_id in list(self._calls):
                await self._send(ws, ProgressFrame(call_id=call_id, event="heartbeat"))

    async def _send(
        self,
        ws: aiohttp.ClientWebSocketResponse,
        frame: ProgressFrame | LogFrame | AnswerFrame | CacheFrame,
    ) -> int:
        """Send ``frame``; how long it was."""
        self._taken.said += 1
        text = encode(frame)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_str(text)
        return len(text)
