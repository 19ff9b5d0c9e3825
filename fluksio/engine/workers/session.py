"""One attached worker: its socket, the calls in flight on it, and how it ends.

A session is the dispatcher's executor for that worker. Calls fail with ``WorkerGone``
when the socket closes ("worker went away mid-call") or when nothing at all has come from
the worker for ``gone_after_s`` while it executes.

A call sent to a worker that then sends nothing at all (no frame, no pong) for
``take_within_s`` was never taken: the worker froze before it could. The worker is paused
in the scheduler until it is heard again; attached directly, the call fails here as
``NotTaken`` (the run machine queues it again, for another worker) and the worker is sent
``cancel``, so that if it wakes it drops the call rather than run it (our agent never
starts a call cancelled before it started; the published agent 0.1.6 may start it and
then kill it). A relayed worker's call is held instead:
:func:`fluksio.engine.workers.connection.machine.requeues_untaken` states the rule. Our agent says
at once that it took a call (a heartbeat); the published agent is pinged after each call
sent, and its pong says it is awake.

A worker whose connection passes through a relay (our agent with ``--connect-to``, a
login node's) can lose its socket while it lives: the relay's SSH connection dropped. Its
session then stays, *away*: its calls in flight are held (the scheduler gives it nothing
new) until the worker attaches again naming them (``resume`` in its hello), and carries
on with the same id, place and calls; or until the 90-second rule ends it, as for any
silent worker. A worker attached directly fails its calls at once when its socket closes,
as the spec says.

A call's ``limit`` travels in the run frame and our agent enforces it where the call runs.
The published agent 0.1.6 ignores that field, so for a worker whose hello names no
version the engine enforces it: at the limit it sends ``cancel`` and fails the call with
``NodeLimit`` at once. For our agent the engine only keeps a backstop, the limit plus the
agent's grace plus ``LIMIT_BACKSTOP_S``.

What happens when is decided by the connection's pure machine
(:mod:`fluksio.engine.workers.connection.machine`); a session carries its effects out.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Collection
from typing import Protocol, assert_never

from aiohttp import WSCloseCode

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.frames import (
    THREAD_VARIABLES,
    AnswerFrame,
    ArtifactRef,
    CacheFrame,
    CancelFrame,
    HelloFrame,
    LogFrame,
    ProgressFrame,
    RunFrame,
    StoppingFrame,
    encode,
)
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Clock
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.workers.connection import effects as connection_effects
from fluksio.engine.workers.connection.holder import Holder
from fluksio.engine.workers.connection.machine import (
    WENT_AWAY,
    ConnectionMachine,
    ConnectionRules,
)
from fluksio.engine.workers.protocol import outcome_of
from fluksio.engine.workers.session_effects import (
    EventCallback,
    Pending,
    SentAhead,
    SessionEffects,
)
from fluksio.engine.workers.socket import CountedSocket
from fluksio.logs import get_logger
from fluksio.provisioners.base import WorkerRecord
from fluksio.wire.provenance import Provenance

__all__ = ["SessionLink", "WorkerSession"]

log = get_logger(__name__)
ARTIFACT_TOKEN_RENEW_S = 3600.0


class SessionLink(Protocol):
    """What a session reports to (the engine's worker connections), given at construction."""

    def answering(self, session: WorkerSession, answering: bool) -> None:
        """It answers again, or stopped: the scheduler gives it nothing new meanwhile."""

    def away(self, session: WorkerSession) -> None:
        """Its relay's socket dropped with calls in flight: they are held for it."""

    def gone(self, session: WorkerSession, reason: str) -> None:
        """It ended for good (its calls have failed): forget it."""

    def welcome(self, session: WorkerSession, kept: list[str]) -> str:
        """The welcome frame it is sent, encoded; ``kept``: of the calls its hello named,
        those carried on."""
        ...

    def stopping(self, session: WorkerSession, why: str) -> None:
        """It is stopping (``why``: what it said): it is given nothing new again."""

    def cached(self, session: WorkerSession, digests: frozenset[str]) -> None:
        """It reported what its artifact cache holds."""

    async def written_through(self) -> None:
        """Every answer read so far is recorded in the store."""


class CallArtifacts(Protocol):
    """How calls on a worker save artifacts as their own (given by the engine)."""

    def mint(self) -> str:
        """A new artifact token for calls on this worker (never the worker token)."""
        ...

    def for_call(self, base: str, call_id: str) -> str:
        """``base`` as call ``call_id``'s own credential."""
        ...

    def refusal(self, call_id: str, state: ArtifactRef) -> str | None:
        """Why call ``call_id`` may not name ``state`` as its checkpoint (None: it may)."""
        ...


class WorkerSession:
    """The I/O around one :class:`ConnectionMachine`: the socket it writes to, the futures
    calls wait on, the timers it asked for, and the link it reports to."""

    def __init__(
        self,
        *,
        token: WorkerIdentity,
        key_id: str,
        hello: HelloFrame,
        ws: CountedSocket,
        clock: Clock,
        rules: ConnectionRules,
        link: SessionLink,
        record: WorkerRecord,
        artifacts: CallArtifacts | None = None,
        batch_job: str | None = None,
    ) -> None:
        self.id = record.worker_id
        self.name = record.name
        self.held_as = Holder.of(token.jti, hello)
        """Who holds its calls, in words a restarted engine can check a worker by."""
        self.token = token
        self.key_id = key_id
        self.hello = hello
        self.ws = ws
        self.clock = clock
        """The engine's: when it attached, was last heard, and each call's timers."""
        self.record = record
        """What the provisioning driver and the worker hooks are told of it."""
        self.batch_job = batch_job
        """The batch job that brought it, as the provisioner calls it (``"Grid Engine job
        12"``), learned from the provisioning request its token was minted for."""
        published = hello.version is None
        self._published = published
        """The published agent 0.1.6: it is sent what its protocol says, and no more."""
        self.pipeline = 0 if published else hello.pipeline
        """Calls it takes ahead of its free slots (the published agent takes none)."""
        self.held_images: list[str] = []
        """The container images it last said it holds ready (its cache frame)."""
        self.machine = ConnectionMachine(
            record.name, hello.relayed, published, clock.now(), rules, self.pipeline > 0
        )
        self._link = link
        self._artifacts = artifacts
        """The credentials calls here save artifacts with, and which states they saved."""
        self._artifact_token: tuple[str, float] | None = None
        """The artifact token calls here get, and when it was minted (monotonic)."""
        self._effects = SessionEffects(self)
        """Its connection machine's effects carried out, and its calls in flight."""
        self._pending = self._effects.pending

    @property
    def labels(self) -> frozenset[str]:
        return frozenset(self.hello.labels)

    # -- the executor interface --------------------------------------------------------

    def call_env(self, call_id: str) -> dict[str, str]:
        if self._artifacts is None:
            return {}
        # Every call here would get a token of the same powers (this worker's, tied to its
        # token), so one serves them all: signing one per call was a tenth of the engine's
        # work per remote call. Renewed hourly, so a call's token has 23 hours left or more.
        now = self.clock.monotonic()
        if self._artifact_token is None or now - self._artifact_token[1] > ARTIFACT_TOKEN_RENEW_S:
            self._artifact_token = (self._artifacts.mint(), now)
        # Bound to the call (a MAC, not a signature): what it saves is known as its own.
        bound = self._artifacts.for_call(self._artifact_token[0], call_id)
        return {"FLUKSIO_ARTIFACT_TOKEN": bound}

    def provenance(self) -> Provenance:
        provisioned = self.token.provisioned_by
        return Provenance(
            worker=self.name,
            host=self.hello.host,
            slurm_job_id=self.hello.slurm_job_id,
            batch_job=self.batch_job,
            provisioner=f"{provisioned[0]}/{provisioned[1]}" if provisioned else None,
            request_id=provisioned[2] if provisioned else None,
        )

    @property
    def identity(self) -> tuple[str, str]:
        """What a newer connection of the same worker shares with it (token and name)."""
        return (self.held_as.token, self.held_as.name)

    def holder(self) -> Holder | None:
        return self.held_as

    async def run(self, spec: RunFrame, on_event: EventCallback) -> CallOutcome:
        future: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        pending = Pending(future, on_event)
        self._pending[spec.call_id] = pending
        try:
            effects = self.machine.send(spec.call_id, spec.limit, self.clock.now())
            if any(isinstance(effect, connection_effects.Fail) for effect in effects):
                self._effects.apply(effects)
                return await self._awaited(spec.call_id, pending)
            frame = _as_published(spec) if self._published else spec
            if self.machine.pipelined and len(self.machine.in_flight()) > self.hello.max_parallel:
                # Every slot has a call: it holds this one until a slot frees, and says
                # when it starts (with a slot free it starts at once: nothing to say).
                on_event(SentAhead(spec.call_id))
            try:
                await self.ws.send_str(encode(frame))
            except (ConnectionError, RuntimeError) as exc:
                effects = self.machine.send_failed(spec.call_id, str(exc))
            self._effects.apply(effects)
        except BaseException:
            self._forget(spec.call_id, pending)
            raise
        return await self._awaited(spec.call_id, pending)

    async def _awaited(self, call_id: str, pending: Pending) -> CallOutcome:
        try:
            return await pending.future
        finally:
            self._forget(call_id, pending)

    def _forget(self, call_id: str, pending: Pending) -> None:
        """The call's owner stopped waiting for it (it has its outcome)."""
        for timer in pending.timers:
            timer.cancel()
        self._pending.pop(call_id, None)
        self.machine.ended(call_id)

    def cancel(self, call_id: str) -> bool:
        if call_id not in self._pending or self.ws.closed:
            return False
        self._effects.send_later(encode(CancelFrame(call_id=call_id)))
        return True

    # -- what arrives on the socket ----------------------------------------------------

    def handle(self, frame: ProgressFrame | LogFrame | AnswerFrame) -> None:
        answer = isinstance(frame, AnswerFrame)
        what = "answer" if isinstance(frame, AnswerFrame) else frame.event
        effects = self.machine.frame(frame.call_id, what, self.clock.now(), last=answer)
        pending = self._pending.get(frame.call_id)
        if what == "started" and pending is not None and isinstance(frame, ProgressFrame):
            pending.on_event(frame)
        if effects or pending is None:
            self._effects.apply(effects)
            return
        if isinstance(frame, LogFrame):
            pending.on_event(frame)
        elif isinstance(frame, ProgressFrame):
            if frame.event not in ("heartbeat", "started"):
                pending.on_event(frame)
        elif not pending.future.done():
            outcome = self._checked(frame.call_id, outcome_of(frame, self.name, self.hello))
            if _refused_as_stopping(frame, self.hello):
                self._link.stopping(self, (outcome.error or {}).get("message", ""))
            pending.future.set_result(outcome)

    def _checked(self, call_id: str, outcome: CallOutcome) -> CallOutcome:
        """A checkpoint naming state its call did not save itself is refused: the call
        failed, saying why (another run's data is never given to its next attempt)."""
        if outcome.checkpoint is None or self._artifacts is None:
            return outcome
        refusal = self._artifacts.refusal(call_id, outcome.checkpoint)
        if refusal is None:
            return outcome
        log.warning("call.checkpoint_refused", worker=self.name, call_id=call_id, why=refusal)
        error = error_record(ErrorKind.REMOTE_ERROR, f"the checkpoint was refused: {refusal}")
        return CallOutcome(False, error=error, logs=outcome.logs)

    def told(self, frame: CacheFrame | StoppingFrame) -> None:
        """A word of its own, of no call (a frame: it was heard): what its artifact cache
        holds, or that it is stopping (told to stop: it is sent nothing more)."""
        self._effects.apply(self.machine.heard_from(self.clock.now()))
        if isinstance(frame, CacheFrame):
            self._link.cached(self, frozenset(frame.holds))
        else:
            self._link.stopping(self, frame.reason)

    def oversized(self, call_id: str, event: str, size: int) -> None:
        self._effects.apply(self.machine.oversized(call_id, event, size, self.clock.now()))

    def expects(self, call_id: str) -> bool:
        """Whether a call of this id is in flight here (its answer is awaited)."""
        return self.machine.expects(call_id)

    def unknown(self, call_id: str, frame: str) -> None:
        """A frame for a call not in flight here, left unread."""
        self._effects.apply(self.machine.frame(call_id, frame, self.clock.now(), last=False))

    async def confirm(self, payload: bytes) -> None:
        """It pinged: the pong, once what it sent before is recorded. Our agent forgets an
        answer only once a pong confirms it, so an answer read by an engine killed before
        writing it is named and sent again to the next one (the acknowledgement costs no
        frame of its own)."""
        self.touch()
        await self._link.written_through()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.pong(payload)

    def touch(self) -> None:
        """Something other than a call's frame came from it (a ping, a pong)."""
        self._effects.apply(self.machine.heard_from(self.clock.now()))

    # -- its life ------------------------------------------------------------------------

    async def welcome(self, resume: list[str], adopted: Collection[str] = ()) -> None:
        """Welcome it over its socket; calls it names from a connection gone are dropped,
        but those ``adopted`` (each then taken over with :meth:`adopt`)."""
        await self._effects.write(self._link.welcome(self, sorted(adopted)))
        self._effects.apply(self.machine.welcomed(resume, adopted))

    def adopt(self, call_id: str, on_event: EventCallback) -> Awaitable[CallOutcome]:
        """A call its hello named, which the engine adopts: its frames go to ``on_event``
        from now on (registered here at once, before the next frame is read)."""
        future: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        pending = Pending(future, on_event)
        if self.machine.expects(call_id):
            self._pending[call_id] = pending
        else:  # its connection ended before it could be taken over
            gone = error_record(ErrorKind.WORKER_GONE, WENT_AWAY)
            future.set_result(CallOutcome(False, error=gone))
        return self._awaited(call_id, pending)

    async def come_back(self, ws: CountedSocket, hello: HelloFrame) -> None:
        """The away worker attached again: carry on over ``ws`` (see
        :meth:`ConnectionMachine.came_back`)."""
        self.ws, self.hello = ws, hello
        effects = self.machine.came_back(hello.resume or [], self.clock.now())
        await self._effects.write(self._link.welcome(self, self.machine.in_flight()))
        self._effects.apply(effects)

    def socket_ended(self, socket: int) -> None:
        """Socket ``socket`` (:attr:`ConnectionMachine.socket` when it was served) ended."""
        self._effects.apply(self.machine.socket_ended(socket))

    async def check(self, now: float, *, busy: bool) -> None:
        """The watcher's look: answering or not, and the 90-second rule."""
        await self._effects.carry_out(self.machine.check(now, busy=busy))

    async def close(
        self,
        reason: str,
        code: int = WSCloseCode.POLICY_VIOLATION,
        kind: ErrorKind = ErrorKind.WORKER_GONE,
    ) -> None:
        """Close the socket saying why; its calls fail with that reason, as ``kind``."""
        await self._effects.carry_out(self.machine.close(reason, code, kind))

    def tell_link(self, effect: connection_effects.LinkNews) -> None:
        """How the connection stands, told to the registry of workers."""
        match effect:
            case connection_effects.Answering():
                self._link.answering(self, effect.answering)
            case connection_effects.Away():
                self._link.away(self)
            case connection_effects.Gone():
                self._link.gone(self, effect.reason)
            case _:
                assert_never(effect)


def _as_published(frame: RunFrame) -> RunFrame:
    """``frame`` as the published agent's protocol says it: its threads are the caps in
    ``env`` (our fields are ignored there, and ``threads`` would change the bytes)."""
    if frame.threads is None:
        return frame
    caps = dict.fromkeys(THREAD_VARIABLES, str(frame.threads))
    return dataclasses.replace(frame, env={**caps, **frame.env}, threads=None)


def _refused_as_stopping(frame: AnswerFrame, hello: HelloFrame) -> bool:
    """Whether our agent refused a call it was sent (``NotTaken`` in its answer): it does
    so only once told to stop, so it is stopping, whether it said so first or not (an
    agent of ours from before it said so)."""
    error = frame.error
    return hello.version is not None and error is not None and error.type == ErrorKind.NOT_TAKEN
