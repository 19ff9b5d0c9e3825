"""The worker's side of the attach socket: the shell of :class:`~.machine.AgentMachine`.

One :class:`Agent` keeps one connection to the engine: it says hello, reads frames, pings,
and hands what its machine decides to its :class:`~fluksio.agent.carrying.Carrier`, which
runs the calls and sends their frames. Each ``run``/``compile`` frame is a call the machine
starts in a slot (through the launcher: a fresh process under ``--python``) or keeps
waiting for one; its events go back as they happen, its output lines too (in batches,
when the engine's welcome offers to take them), a heartbeat every ``heartbeat_s`` while it
runs, and its answer, sent after all of those, ends it.

When the connection drops (no close frame: the engine died, or the path did), or the
engine closes it saying it is going away (a graceful stop, an upgrade), the calls go on,
their frames are held (:mod:`~fluksio.agent.machine.held`), the next hello names them
(``resume``) and the held frames follow the welcome: a restarted engine adopts them, one
that lived through the drop (it failed them) tells the agent to drop them. Any other
close stops them. After ``--engine-away-s`` without getting back, the agent stops them
and exits 4. It reconnects with capped exponential backoff and jitter. An answer is
forgotten only once the engine's pong to a later ping says it is recorded
(:mod:`~fluksio.agent.machine.unconfirmed`). A refusal (another protocol, a revoked or invalid
token, unsigned labels) is final: the agent says why and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets

import aiohttp

from fluksio.agent.attaching import (
    AgentConfig,
    Refused,
    connector_for,
    describe_failure,
    dial,
    hello_frame,
    reconnect_delay,
    untrusted,
)
from fluksio.agent.carrying import Carrier
from fluksio.agent.clock import SYSTEM_CLOCK, Clock
from fluksio.agent.launcher import Launcher
from fluksio.agent.machine.agent_machine import AgentMachine, Welcome
from fluksio.agent.protocol.frames import (
    CancelFrame,
    ProgressFrame,
    RefusedFrame,
    RunFrame,
    WelcomeFrame,
    encode,
    from_engine,
)

__all__ = ["Agent", "AgentConfig", "Refused"]

CLOSE_SUPERSEDED = 4409  # the engine replaced this session by a newer one of the same worker
CLOSE_DRAINED = 4010  # the worker's batch job ends too soon for more work: leave
EXIT_ENGINE_AWAY = 4  # the engine did not come back within --engine-away-s
ENGINE_AWAY_STATUSES = frozenset({502, 503, 504})
"""A standby's answer (503), or a proxy's for the engine behind it (502, 504)."""
STANDBY_ATTEMPT = 2
"""A standby engine's 503 counts as at most this many failures in a row: the next dial
is within a second or two (see :func:`~fluksio.agent.attaching.reconnect_delay`)."""
log = logging.getLogger("fluksio.worker")
WELCOME_WITHIN_S = 30.0
"""How long the agent waits for the engine's welcome after its hello."""
NOTICE_GRACE_S = 10.0
"""Told to stop (SIGTERM), how long the agent's calls have after their notice signal to
end by themselves (save their state, return) before they are stopped."""
STOPPED_WITHIN_S = 15.0
"""Then how long the stopped calls have to end and their answers to go out before the
agent leaves anyway: both inside Slurm's KillWait (30 s by default), after which the
job's processes are killed."""


class Agent:
    def __init__(
        self, config: AgentConfig, launcher: Launcher, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.config = config
        self.launcher = launcher
        self._clock = clock
        self.machine = AgentMachine(
            config.settings.parallel,
            relayed=config.route is not None,
            engine_away_s=config.settings.engine_away(),
        )
        self._carrier = Carrier(config, launcher, self.machine, clock)
        self.instance = secrets.token_hex(8)
        """This process among workers of one token and name: said in every hello, so that
        an engine gives back the calls it holds to it alone."""
        self._engine_closed = False
        """Whether the engine closed the last connection with a close frame (else the
        path dropped: aiohttp reports a bare end of stream as OK or as abnormal, by race)."""
        self._stop = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None
        self._gave_up = False
        """The engine was away past --engine-away-s: its calls stopped, the agent leaves."""
        self._away = asyncio.Event()
        """Set while its connection is lost: the away watch waits for it."""

    # -- the outer loop ----------------------------------------------------------------

    async def run(self) -> int:
        """Stay attached until refused (exit 3) or idle for ``--max-idle`` (exit 0)."""
        attempt = 0
        idle_watch = asyncio.get_running_loop().create_task(self._watch_idle())
        away_watch = asyncio.get_running_loop().create_task(self._watch_away())
        try:
            while not self._stop.is_set():
                checked = self.machine.check(self._clock.monotonic())
                if await self._carrier.carry_out_dropping(checked):
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
                    away = (
                        exc.status
                        if isinstance(exc, aiohttp.WSServerHandshakeError)
                        and exc.status in ENGINE_AWAY_STATUSES
                        else None
                    )
                    log.warning(
                        "cannot reach the engine at %s: %s",
                        self.config.url.websocket,
                        describe_failure(exc)
                        if away is None
                        else f"{away}: a standby, or a proxy whose engine is away",
                    )
                    self.config.next_engine()
                    if away is not None:
                        # Answered: a standby (one of its database's engines takes over
                        # within seconds) or a proxy before an engine coming back. Tried
                        # again soon, however long the engines were away.
                        attempt = min(attempt, STANDBY_ATTEMPT - 1)
                if self._stop.is_set():
                    break
                attempt = 0 if welcomed else attempt + 1
                draw = random.random()  # noqa: S311 - jitter, not security
                delay = reconnect_delay(attempt, self.config.backoff_max_s, draw)
                log.info("reconnecting in %.1f s", delay)
                with contextlib.suppress(TimeoutError):
                    async with self._clock.timeout(delay):
                        await self._stop.wait()
            return EXIT_ENGINE_AWAY if self._gave_up else 0
        finally:
            idle_watch.cancel()
            away_watch.cancel()

    def told_to_stop(self, why: str) -> None:
        """SIGTERM (a batch job preempted, cancelled or at its end, a service stopped):
        the running calls are stopped and answered ``Interrupted``, so that the engine runs
        them again elsewhere without counting a failure, then the agent leaves."""
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().create_task(self._stop_calls(why))

    async def _stop_calls(self, why: str) -> None:
        noticed = set(await self._carrier.stopping(why))
        if noticed:
            said = "%s: %d running call(s) given notice, %g s to end by themselves"
            log.warning(said, why, len(noticed), NOTICE_GRACE_S)
            await self._until_ended(noticed, NOTICE_GRACE_S)
        stopped = set(self._carrier.interrupt(why))
        said = "%s: stopping %d running call(s), told to the engine as interrupted"
        log.warning(said, why, len(stopped))
        await self._until_ended(stopped, STOPPED_WITHIN_S)
        self._stop.set()
        if self._carrier.ws is not None:
            await self._carrier.ws.close()

    async def _until_ended(self, calls: set[str], within_s: float) -> None:
        """Until none of ``calls`` runs (each leaves once its answer went out), or
        ``within_s`` has passed."""
        with contextlib.suppress(TimeoutError):
            async with self._clock.timeout(within_s):
                while calls & set(self._carrier.running()):
                    await self._clock.sleep(0.05)

    async def _watch_away(self) -> None:
        """Stop the calls of an engine away past ``--engine-away-s`` on time, though a
        dial may hang meanwhile (a silent path holds one for its welcome's wait): the
        engine runs a lost call elsewhere after the deadline the hello told it
        (``keeps_s``), so none may run on past it. The agent leaves at its next dial."""
        while not self._gave_up:
            await self._away.wait()
            due = self.machine.gives_up_at()
            if due is None:  # welcomed back meanwhile, or it waits for ever
                self._away.clear()
                continue
            await self._clock.sleep(max(0.0, due - self._clock.monotonic()))
            checked = self.machine.check(self._clock.monotonic())
            if await self._carrier.carry_out_dropping(checked):
                self._gave_up = True
                self._stop.set()

    async def _watch_idle(self) -> None:
        limit = self.config.settings.max_idle
        if not limit:
            return
        told = False  # that this stretch of idleness counts toward --max-idle
        while True:
            await self._clock.sleep(min(1.0, limit / 4))
            idle = self.machine.idle()
            if idle and not told:
                # Said once a stretch: an operator sees why the worker will stop, and when
                # (an answer the engine has not confirmed keeps it from being idle).
                log.info("idle: stopping after %g s without a call (--max-idle)", limit)
            told = idle
            if idle and self._clock.monotonic() - self._carrier.idle_since >= limit:
                log.info("idle for %g s: stopping", limit)
                self._stop.set()
                if self._carrier.ws is not None:
                    await self._carrier.ws.close()
                return

    # -- one connection ----------------------------------------------------------------

    async def _session(self) -> bool:
        """One connection, until it ends; True if the engine welcomed us."""
        async with aiohttp.ClientSession(connector=connector_for(self.config)) as http:
            ws = await dial(http, self.config)
            self._carrier.ws = ws
            try:
                reply = await self._welcomed(ws)
                log.info("attached to %s as %s", self.config.url.websocket, reply.name)
                await self._carrier.welcomed(Welcome.of(reply), reply)
                self._away.clear()
                heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(ws))
                pinger = asyncio.get_running_loop().create_task(self._ping(ws))
                try:
                    reason = await self._receive(ws)
                finally:
                    heartbeat.cancel()
                    pinger.cancel()
                    await self._carrier.carry_out_dropping(
                        self.machine.dropped(
                            closed_by_engine=self._engine_closed,
                            code=ws.close_code,
                            now=self._clock.monotonic(),
                        )
                    )
                    self._away.set()
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
                self._carrier.ws = None
                await ws.close()

    async def _welcomed(self, ws: aiohttp.ClientWebSocketResponse) -> WelcomeFrame:
        """Say hello; the engine's welcome, or :class:`Refused` saying why not."""
        hello = hello_frame(self.config, self.launcher, self.machine.resume(), self.instance)
        await ws.send_str(encode(hello))
        async with self._clock.timeout(WELCOME_WITHIN_S):
            first = await ws.receive()
        if first.type != aiohttp.WSMsgType.TEXT:
            raise aiohttp.ClientError(f"the engine closed the connection ({first.extra})")
        try:
            reply = from_engine(json.loads(first.data))
        except ValueError as exc:
            raise Refused(f"the engine's answer to the hello cannot be read: {exc}") from None
        if isinstance(reply, RefusedFrame):
            raise Refused(reply.reason)
        if not isinstance(reply, WelcomeFrame):
            raise Refused(f"the engine answered {first.data[:80]!r} instead of welcome")
        return reply

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse) -> str:
        """Handle frames until the connection ends; returns the engine's reason, if any."""
        self._engine_closed = False
        while True:
            # Never later than the engine's own silence rule, where its welcome says it:
            # so the engine knows by when this worker stops a lost call.
            gone_s = min(self.config.gone_s, self.machine.welcome.gone_s or self.config.gone_s)
            try:
                async with self._clock.timeout(gone_s):
                    message = await ws.receive()
            except TimeoutError:
                return f"no message from the engine for {gone_s:g} s"
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
                call = from_engine(frame)
            except ValueError as exc:
                log.warning("ignoring a malformed frame: %s", exc)
                continue
            if isinstance(call, RunFrame):
                await self._carrier.take(call)
            elif isinstance(call, CancelFrame):
                await self._carrier.carry_out_dropping(self.machine.cancel(call.call_id))

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while not ws.closed:
            await self._clock.sleep(self.config.ping_s)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.ping(self.machine.ping().payload)

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            await self._clock.sleep(self.config.settings.heartbeat)
            for call_id in self._carrier.running():
                await self._carrier.send(ws, ProgressFrame(call_id=call_id, event="heartbeat"))
