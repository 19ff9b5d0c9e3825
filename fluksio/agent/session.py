"""The worker's side of the attach socket: hello, calls, events, heartbeats, reconnects.

One :class:`Agent` keeps one connection to the engine. Each ``run``/``compile`` frame
becomes a call through the launcher (a fresh process under ``--python``); its events go
back as they happen, its output lines too (in batches, when the engine's welcome offers
to take them), a heartbeat every ``heartbeat_s`` while it runs, and its answer, sent after
all of those, ends it.

When the connection drops (no close frame: the engine died, or the path did), or the
engine closes it saying it is going away (a graceful stop, an upgrade), the calls go on:
the agent cannot tell a restarting engine from a cut path, and a restarted engine adopts
what it names. Their answers and events are held, with the tail of their output lines
(bounded: :mod:`~fluksio.agent.held`); the next
hello names the calls (``resume``) and the held frames follow the welcome. An engine that
does not adopt a call (it failed it meanwhile: a live engine fails a dropped worker's
calls at once) tells the agent to drop it. After ``--engine-away-s`` without getting
back, they are killed and the agent exits 4. Any other close by the engine (superseded,
drained, silent, refused) ends the calls, which the engine has failed. The agent
reconnects with capped exponential backoff and jitter. An answer is forgotten only once
the engine's pong to a later ping says it is recorded (:mod:`~fluksio.agent.unconfirmed`).
A refusal (another protocol, a revoked or invalid token, unsigned labels) is final: the
agent says why and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import random
from typing import Any

import aiohttp

from fluksio.agent.attaching import (
    AgentConfig,
    Refused,
    describe_failure,
    hello_frame,
    offered_artifacts,
    reconnect_delay,
    untrusted,
    why_refused,
)
from fluksio.agent.cache_report import CacheReport
from fluksio.agent.clock import SYSTEM_CLOCK, Clock
from fluksio.agent.connect_to import RoutedConnector
from fluksio.agent.frames import (
    AnswerFrame,
    CacheFrame,
    CancelFrame,
    ErrorRecord,
    LogFrame,
    ProgressFrame,
    RunFrame,
    encode,
    read_engine_frame,
)
from fluksio.agent.held import Held
from fluksio.agent.launcher import CallOutcome, CallSpec, Launcher, error_record
from fluksio.agent.outcome import ErrorKind
from fluksio.agent.prefetch import Prefetches
from fluksio.agent.shared_store import shared_store_env
from fluksio.agent.slots import Slots
from fluksio.agent.taken import TakenWords
from fluksio.agent.unconfirmed import Unconfirmed

__all__ = ["Agent", "AgentConfig", "Refused"]

CLOSE_SUPERSEDED = 4409  # the engine replaced this session by a newer one of the same worker
CLOSE_DRAINED = 4010  # the worker's batch job ends too soon for more work: leave
EXIT_ENGINE_AWAY = 4  # the engine did not come back within --engine-away-s
CLOSE_GOING_AWAY = 1001  # the engine is stopping (and will be back): its calls go on
log = logging.getLogger("fluksio.worker")
_ERROR_FIELDS = frozenset(f.name for f in dataclasses.fields(ErrorRecord))
MAX_FRAME_BYTES = 64 * 1024 * 1024
WELCOME_WITHIN_S = 30.0
"""How long the agent waits for the engine's welcome after its hello."""


class Agent:
    def __init__(
        self, config: AgentConfig, launcher: Launcher, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.config = config
        self.launcher = launcher
        self._clock = clock
        self._calls: dict[str, asyncio.Task[None]] = {}
        self._dropped: set[str] = set()
        """Calls cancelled before they started (a frozen agent wakes to a run frame and the
        engine's cancel behind it): never started."""
        self._idle_since = self._clock.monotonic()
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._live_logs = False
        """The engine offered to take calls' lines while they run (our engines do)."""
        self._held = Held()
        """Frames of calls kept through a drop, sent after the next welcome."""
        self._engine_closed = False
        """Whether the engine closed the last connection with a close frame (else the
        path dropped: aiohttp reports a bare end of stream as OK or as abnormal, by race)."""
        self._unconfirmed = Unconfirmed()
        self._stop = asyncio.Event()
        self._session_env: dict[str, str] = {}
        self._slots = Slots(config.parallel)
        self._prefetches = Prefetches()
        self._cache = CacheReport(clock, {**os.environ, **config.extra_env})
        self._tells_cache = False
        """The engine takes reports of what the artifact cache holds."""
        self._pipelined = False
        """The engine takes calls ahead of a free slot here: each says ``started``."""
        self._taken = TakenWords(clock)

    # -- the outer loop ----------------------------------------------------------------

    async def run(self) -> int:
        """Stay attached until refused (exit 3) or idle for ``--max-idle`` (exit 0)."""
        attempt = 0
        away_since: float | None = None
        """When the last welcomed connection ended: the engine is away since."""
        idle_watch = asyncio.get_running_loop().create_task(self._watch_idle())
        try:
            while not self._stop.is_set():
                if self._gave_up_on_engine(away_since):
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
                if welcomed:
                    away_since = self._clock.monotonic()
                draw = random.random()  # noqa: S311 - jitter, not security
                delay = reconnect_delay(attempt, self.config.backoff_max_s, draw)
                log.info("reconnecting in %.1f s", delay)
                with contextlib.suppress(TimeoutError):
                    async with self._clock.timeout(delay):
                        await self._stop.wait()
            return 0
        finally:
            idle_watch.cancel()

    def _gave_up_on_engine(self, away_since: float | None) -> bool:
        """The engine has been away longer than ``--engine-away-s``: what runs is stopped
        (nobody would take its answer), and that is said in one sentence."""
        limit = self.config.engine_away_s
        if away_since is None or not limit or self._clock.monotonic() - away_since < limit:
            return False
        log.error(
            "the engine at %s has not come back for %g s (--engine-away-s): stopping %d"
            " call(s) and exiting",
            self.config.url.websocket,
            limit,
            len(self._calls),
        )
        self._abandon_calls()
        return True

    async def _watch_idle(self) -> None:
        limit = self.config.max_idle_s
        if not limit:
            return
        while True:
            await self._clock.sleep(min(1.0, limit / 4))
            idle = not self._calls and not self._held
            if idle and self._clock.monotonic() - self._idle_since >= limit:
                log.info("idle for %g s: stopping", limit)
                self._stop.set()
                if self._ws is not None:
                    await self._ws.close()
                return

    # -- one connection ----------------------------------------------------------------

    async def _session(self) -> bool:
        """One connection, until it ends; True if the engine welcomed us."""
        headers = {"Authorization": f"Bearer {self.config.token}"}
        route = self.config.route
        tls = self.config.tls if self.config.tls else True
        connector = (
            RoutedConnector(route, ssl=tls) if route is not None else aiohttp.TCPConnector(ssl=tls)
        )
        async with aiohttp.ClientSession(connector=connector) as http:
            try:
                ws = await http.ws_connect(
                    self.config.url.websocket,
                    headers=headers,
                    # No aiohttp heartbeat: it closes after 1.5 unanswered pings, long
                    # before the 90-second rule. Silence is judged in _receive instead.
                    autoping=False,
                    max_msg_size=MAX_FRAME_BYTES,
                    compress=0,
                )
            except aiohttp.WSServerHandshakeError as exc:
                if exc.status in (401, 403):
                    raise Refused(await why_refused(http, self.config, exc.status)) from None
                raise
            self._ws = ws
            try:
                reply = await self._welcomed(ws)
                log.info("attached to %s as %s", self.config.url.websocket, reply.get("name"))
                self._live_logs = reply.get("logs") is True
                self._tells_cache = reply.get("cache") is True and self.config.report_cache
                self._cache.reset()
                taken_ahead = reply.get("pipeline")
                self._pipelined = isinstance(taken_ahead, int) and taken_ahead > 0
                self._taken.welcomed(reply.get("take_s"))
                await self._carry_on(ws)
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
                    self._after_drop(ws.close_code)
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
        hello = hello_frame(self.config, self.launcher, self._held.names(self._calls))
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
                self._unconfirmed.pong(message.data)
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
                self._start(call)
            elif (
                isinstance(call, CancelFrame)
                and not self.launcher.cancel(call.call_id)
                and call.call_id in self._calls
                and not self._slots.drop(call.call_id)
            ):
                self._dropped.add(call.call_id)

    def _start(self, frame: RunFrame) -> None:
        call_id = frame.call_id
        spec = CallSpec(
            call_id=call_id,
            source=frame.source,
            node=frame.node,
            flow=frame.flow,
            op=frame.op,
            kwargs=frame.kwargs,
            env={**self.config.extra_env, **self._session_env, **frame.env},
            timeout=frame.timeout,
            limit=frame.limit or 0.0,
        )
        task = asyncio.get_running_loop().create_task(self._call(spec))
        self._calls[call_id] = task
        task.add_done_callback(lambda _t: self._ended(call_id))

    def _ended(self, call_id: str) -> None:
        self._calls.pop(call_id, None)
        self._dropped.discard(call_id)
        if not self._calls:
            self._idle_since = self._clock.monotonic()

    async def _call(self, spec: CallSpec) -> None:
        sending: set[asyncio.Task[None]] = set()

        def on_event(record: dict[str, Any]) -> None:
            event: ProgressFrame | LogFrame
            if record.get("event") == "log":
                if not self._live_logs:
                    return  # an engine that did not offer them: the answer's logs only
                event = LogFrame(call_id=spec.call_id, first=record["first"], lines=record["lines"])
            else:
                event = ProgressFrame(
                    call_id=spec.call_id,
                    event=record.get("event", "emit"),
                    outputs=record.get("outputs"),
                    ts=record.get("ts"),
                )
            task = asyncio.get_running_loop().create_task(self._deliver(event))
            sending.add(task)
            task.add_done_callback(sending.discard)

        if self._slots.full or not self._pipelined:
            taken = ProgressFrame(call_id=spec.call_id, event="heartbeat")
            await self._taken.say(lambda: self._deliver(taken), lambda: spec.call_id in self._calls)
        # A call taken ahead waits here for a slot (its inputs fetched meanwhile); one
        # cancelled meanwhile never starts.
        if self._slots.full:
            self._prefetches.start(spec)
        runs = spec.call_id not in self._dropped and await self._slots.take(spec.call_id)
        if runs and spec.call_id in self._dropped:
            self._slots.give_back()
            runs = False
        if not runs:
            self._dropped.discard(spec.call_id)
            dropped = error_record(
                ErrorKind.NODE_CANCELLED, "the call was cancelled before it started"
            )
            outcome = CallOutcome(False, error=dropped)
        else:
            try:
                if self._pipelined:
                    await self._deliver(ProgressFrame(call_id=spec.call_id, event="started"))
                outcome = await self.launcher.run(spec, on_event)
            finally:
                self._slots.give_back()
        if sending:  # its last lines and events go before its answer, which ends it
            await asyncio.gather(*sending)
        error = None
        if not outcome.ok:
            fields = {k: str(v) for k, v in (outcome.error or {}).items() if k in _ERROR_FIELDS}
            error = ErrorRecord(**fields)
        answer = AnswerFrame(
            call_id=spec.call_id,
            ok=outcome.ok,
            result=outcome.result if outcome.ok else None,
            error=error,
            logs=outcome.logs,
        )
        await self._deliver(answer)
        if self._tells_cache:  # what it fetched may be worth placing calls by
            self._cache.changed(self._send_now)

    async def _send_now(self, frame: CacheFrame) -> None:
        ws = self._ws
        if ws is not None and not ws.closed:
            await self._send(ws, frame)

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while not ws.closed:
            await self._clock.sleep(self.config.ping_s)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.ping(self._unconfirmed.ping())

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            await self._clock.sleep(self.config.heartbeat_s)
            for call_id in list(self._calls):
                await self._send(ws, ProgressFrame(call_id=call_id, event="heartbeat"))

    def _abandon_calls(self) -> None:
        """The connection is gone, and the engine has failed these calls: stop them."""
        self._slots.drop_all()  # taken ahead: they never start now
        for call_id in list(self._calls):
            if not self.launcher.cancel(call_id):
                self._dropped.add(call_id)  # not started yet (taking it): it never will
        self._held.take()

    # -- kept through a drop ---------------------------------------------------------

    def _after_drop(self, close_code: int | None) -> None:
        """Keep the calls if the connection dropped (no close frame from the engine) or the
        engine said it is going away; else stop them (the engine has failed them). Away,
        the next hello says so (``resume``), even with no call kept: a call whose run frame
        was lost with the path is then queued again, not failed."""
        unconfirmed = self._unconfirmed.take()  # sent, but perhaps never recorded
        if self._engine_closed and close_code != CLOSE_GOING_AWAY:
            self._abandon_calls()
            return
        if not self._held.away:
            limit = self.config.engine_away_s
            log.warning(
                "the connection to the engine ended (%s): keeping %d call(s)%s",
                "it is going away" if self._engine_closed else "dropped",
                len(self._calls) + self._held.answers() + len(unconfirmed),
                f" for up to {limit:g} s (--engine-away-s)" if limit else "",
            )
        self._held.begin(unconfirmed)

    async def _carry_on(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Welcomed back: what was held while away goes first."""
        for frame in self._held.take():
            await self._deliver(frame)

    async def _deliver(self, frame: ProgressFrame | LogFrame | AnswerFrame) -> None:
        """Send a call's frame now, or hold it while the connection is down and kept (not
        heartbeats; lines up to :data:`HELD_LINES_BYTES`, the oldest let go)."""
        ws = self._ws
        if ws is not None and not ws.closed:
            size = await self._send(ws, frame)
            if isinstance(frame, AnswerFrame):
                self._unconfirmed.sent(frame, size)
                # Through a relay, whose path drops more often, each answer is confirmed at
                # once; otherwise with the next ping, or sooner once many wait.
                if self.config.route is not None or self._unconfirmed.due():
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await ws.ping(self._unconfirmed.ping())
        else:
            self._held.hold(frame)

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
