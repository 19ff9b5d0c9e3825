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
then kill it). A relayed worker's call is held instead: :func:`requeues_untaken` states
the rule. Our agent says at once
that it took a call (a heartbeat); the published agent is pinged after each call sent,
and its pong says it is awake.

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
agent's grace plus :data:`LIMIT_BACKSTOP_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode

from fluksio.agent.frames import (
    CONTROL_FRAME_BYTES,
    AnswerFrame,
    CancelFrame,
    HelloFrame,
    LogFrame,
    ProgressFrame,
    RunFrame,
    RunRef,
    encode,
)
from fluksio.agent.launcher import LIMIT_GRACE_S, CallOutcome, CallSpec, error_record, limit_error
from fluksio.agent.outcome import ErrorKind
from fluksio.clock import Clock, Timer
from fluksio.engine.logging import get_logger
from fluksio.engine.runs.provenance import Provenance
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.workers.socket import CountedSocket

__all__ = ["WorkerSession"]

log = get_logger(__name__)
EventCallback = Callable[[dict[str, Any]], None]
_UNKNOWN_FRAMES_LOGGED = 10
ARTIFACT_TOKEN_RENEW_S = 3600.0
LIMIT_BACKSTOP_S = 10.0
"""How long after a call's ``limit`` and the agent's grace the engine stops waiting for our
agent to stop it (it would have answered by then, unless something is wrong there)."""


@dataclass
class _Pending:
    future: asyncio.Future[CallOutcome]
    on_event: EventCallback


def requeues_untaken(hello: HelloFrame) -> bool:
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
    return not hello.relayed


@dataclass
class WorkerSession:
    id: str
    name: str
    identity: tuple[str, str]
    token: WorkerIdentity
    key_id: str
    hello: HelloFrame
    ws: CountedSocket
    clock: Clock
    """The engine's: when it attached, was last heard, and each call's timers."""
    attached_at: float = 0.0
    last_seen: float = 0.0
    closed_reason: str | None = None
    mint_artifact_token: Callable[[], str] | None = None
    """Mints a token a call on this worker uses for artifacts (not the worker token)."""
    batch_job: str | None = None
    """The batch job that brought it, as the provisioner calls it (``"Grid Engine job
    12"``), learned from the provisioning request its token was minted for."""
    take_within_s: float = 15.0
    """A call sent here with nothing at all heard since, this long, was never taken."""
    heard: int = 0
    """How many times anything came from it (a frame, a pong): what "heard since" counts,
    so that two things at one instant of the clock are still told apart."""
    not_taking_after: int | None = None
    """``heard`` when a call was sent that it never took: it answers again once heard after."""
    _pending: dict[str, _Pending] = field(default_factory=dict)
    _artifact_token: tuple[str, float] | None = None
    """The artifact token calls here get, and when it was minted (monotonic)."""
    _unknown_frames: int = 0
    away: bool = False
    """Its socket dropped with calls in flight, and it may come back for them."""
    _farewell: Callable[[], None] | None = None
    """While away: what ends it for good (the attach handler's farewell, which has
    returned), called once when it is closed instead of coming back."""

    def __post_init__(self) -> None:
        self.attached_at = self.last_seen = self.clock.now()

    @property
    def labels(self) -> frozenset[str]:
        return frozenset(self.hello.labels)

    # -- the executor interface --------------------------------------------------------

    def call_env(self) -> dict[str, str]:
        if self.mint_artifact_token is None:
            return {}
        # Every call here would get a token of the same powers (this worker's, tied to its
        # token), so one serves them all: signing one per call was a tenth of the engine's
        # work per remote call. Renewed hourly, so a call's token has 23 hours left or more.
        now = self.clock.monotonic()
        if self._artifact_token is None or now - self._artifact_token[1] > ARTIFACT_TOKEN_RENEW_S:
            self._artifact_token = (self.mint_artifact_token(), now)
        return {"FLUKSIO_ARTIFACT_TOKEN": self._artifact_token[0]}

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

    async def run(self, spec: CallSpec, on_event: EventCallback) -> CallOutcome:
        if self.closed_reason is not None:
            return CallOutcome(False, error=error_record(ErrorKind.WORKER_GONE, self.closed_reason))
        if self.away:
            said = f"worker {self.name} is away (its connection dropped); queued again"
            return CallOutcome(False, error=error_record(ErrorKind.NOT_TAKEN, said))
        future: asyncio.Future[CallOutcome] = asyncio.get_running_loop().create_future()
        self._pending[spec.call_id] = _Pending(future, on_event)
        frame = RunFrame(
            op="compile" if spec.op == "compile" else "run",
            call_id=spec.call_id,
            flow=spec.flow,
            node=spec.node,
            source=spec.source,
            kwargs=spec.kwargs,
            run=RunRef(id=spec.run_id) if spec.run_id else None,
            timeout=spec.timeout,
            env=spec.env,
            limit=spec.limit or None,
        )
        stopper = self._enforce_limit(spec) if spec.limit > 0 else None
        taken: Timer | None = None
        try:
            heard_before = self.heard
            await self.ws.send_str(encode(frame))
            if self.hello.version is None:
                # The published agent says nothing when it takes a call (its first heartbeat
                # comes 10 s later): its pong to this ping shows it was not frozen.
                await self.ws.ping()
            taken = self._expect_taken(spec.call_id, heard_before)
            return await future
        except (ConnectionError, RuntimeError) as exc:
            return CallOutcome(
                False,
                error=error_record(ErrorKind.WORKER_GONE, f"worker went away mid-call ({exc})"),
            )
        finally:
            if stopper is not None:
                stopper.cancel()
            if taken is not None:
                taken.cancel()
            self._pending.pop(spec.call_id, None)

    def _expect_taken(self, call_id: str, heard_before: int) -> Timer:
        """Give the call back if the worker sends nothing at all within ``take_within_s``."""

        def check() -> None:
            pending = self._pending.get(call_id)
            if pending is None or pending.future.done() or self.heard > heard_before:
                return
            log.warning("worker.not_taking", worker=self.name, worker_id=self.id, call_id=call_id)
            self.not_taking_after = heard_before
            if not requeues_untaken(self.hello):
                return  # held, as an away worker's calls are: see requeues_untaken
            self.cancel(call_id)
            said = (
                f"worker {self.name} sent nothing for {self.take_within_s:g} s after it was"
                " sent the call, so never took it; queued again for another worker"
            )
            pending.future.set_result(
                CallOutcome(False, error=error_record(ErrorKind.NOT_TAKEN, said))
            )

        return self.clock.call_later(self.take_within_s, check)

    def _enforce_limit(self, spec: CallSpec) -> Timer:
        """Stop the call at its limit if the worker will not (see the module docstring)."""
        published = self.hello.version is None
        delay = spec.limit if published else spec.limit + LIMIT_GRACE_S + LIMIT_BACKSTOP_S

        def stop() -> None:
            pending = self._pending.get(spec.call_id)
            if pending is None or pending.future.done():
                return
            self.cancel(spec.call_id)
            pending.future.set_result(CallOutcome(False, error=limit_error(spec.limit)))

        return self.clock.call_later(delay, stop)

    def cancel(self, call_id: str) -> bool:
        if call_id not in self._pending or self.ws.closed:
            return False
        frame = encode(CancelFrame(call_id=call_id))
        task = asyncio.get_running_loop().create_task(self.ws.send_str(frame))
        task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        return True

    # -- what arrives on the socket ----------------------------------------------------

    def handle(self, frame: ProgressFrame | LogFrame | AnswerFrame) -> None:
        self._heard()
        pending = self._pending.get(frame.call_id)
        if pending is None:
            self.unknown(frame.call_id, "answer" if isinstance(frame, AnswerFrame) else frame.event)
            return
        if isinstance(frame, LogFrame):
            pending.on_event({"event": "log", "first": frame.first, "lines": frame.lines})
            return
        if isinstance(frame, ProgressFrame):
            if frame.event != "heartbeat":
                pending.on_event({"event": frame.event, "outputs": frame.outputs, "ts": frame.ts})
            return
        error = dataclasses.asdict(frame.error) if frame.error is not None else None
        if not frame.ok and error is None:
            error = error_record(
                ErrorKind.REMOTE_ERROR, "the worker reported a failure without details"
            )
        if error is not None and error.get("type") == "SyntaxError":
            error = self._compiled_here(error)
        if not pending.future.done():
            pending.future.set_result(
                CallOutcome(frame.ok, result=frame.result, error=error, logs=frame.logs)
            )

    def oversized(self, call_id: str, event: str, size: int) -> None:
        """A frame of a call, not its answer, larger than the wire allows: the call fails
        as ``FrameTooLarge`` and is stopped on the worker (the worker and its other calls
        go on)."""
        self._heard()
        pending = self._pending.get(call_id)
        if pending is None or pending.future.done():
            self.unknown(call_id, f"{event} of {size} bytes, over the bound")
            return
        said = (
            f"the call's {event} frame was {size} bytes; frames other than its answer are at"
            f" most {CONTROL_FRAME_BYTES} bytes: save large data as an artifact"
        )
        self.cancel(call_id)
        pending.future.set_result(
            CallOutcome(False, error=error_record(ErrorKind.FRAME_TOO_LARGE, said))
        )

    def expects(self, call_id: str) -> bool:
        """Whether a call of this id is in flight here (its answer is awaited)."""
        return call_id in self._pending

    def unknown(self, call_id: str, frame: str) -> None:
        """A frame for a call not in flight here: one that already failed (late answers
        are normal after a limit), or one never sent to this worker. Nothing changes; the
        first few are logged, so a worker cannot flood the log with them."""
        self._heard()
        self._unknown_frames += 1
        if self._unknown_frames <= _UNKNOWN_FRAMES_LOGGED:
            log.warning(
                "worker.unknown_call",
                worker=self.name,
                worker_id=self.id,
                call_id=call_id[:64],
                frame=frame,
                seen=self._unknown_frames,
            )

    def _compiled_here(self, error: dict[str, str]) -> dict[str, str]:
        """A syntax error names the Python that found it: the worker's, not the engine's."""
        python = (
            f"Python {self.hello.python_version}"
            if self.hello.python_version
            else f"its Python ({self.hello.python or 'unknown'})"
        )
        where = f" (compiled on worker {self.name} with {python})"
        return {
            **error,
            "message": error.get("message", "") + where,
            "short": error.get("short", "SyntaxError") + where,
        }

    def touch(self) -> None:
        self._heard()

    def _heard(self) -> None:
        self.last_seen = self.clock.now()
        self.heard += 1

    # -- away and back -----------------------------------------------------------------

    def may_come_back(self) -> bool:
        """Whether its dropped socket leaves it away rather than gone: it is relayed, has
        calls in flight, and nothing on this side closed it."""
        live = any(not p.future.done() for p in self._pending.values())
        return self.hello.relayed and live and self.closed_reason is None

    def go_away(self, farewell: Callable[[], None]) -> None:
        """Its relay dropped, not the worker: it stays, its calls held, until it comes back
        or is closed (then ``farewell`` ends it for good, once)."""
        self.away, self._farewell = True, farewell

    def come_back(self, ws: CountedSocket, hello: HelloFrame) -> list[str]:
        """The worker attached again: carry on over ``ws``. Calls it does not name never
        reached it (it names every call it started until the engine has its answer), so
        they go back in line, as never taken; returns the ids it holds that are not in
        flight here any more (ended or cancelled meanwhile), for it to be told to drop."""
        held = set(hello.resume or ())
        for call_id, pending in list(self._pending.items()):
            if call_id not in held and not pending.future.done():
                lost = error_record(
                    ErrorKind.NOT_TAKEN,
                    f"the run frame was lost with worker {self.name}'s relay path (it came"
                    " back without the call, so never started it); queued again",
                )
                pending.future.set_result(CallOutcome(False, error=lost))
        self.ws, self.hello, self.away, self._farewell = ws, hello, False, None
        self._heard()
        return sorted(held - set(self._pending))

    def fail_all(self, reason: str, kind: ErrorKind = ErrorKind.WORKER_GONE) -> None:
        """Fail every call in flight (the socket is gone, or the worker went silent), as
        ``kind``: ``WorkerGone`` unless the cause is known to be something else."""
        self.closed_reason = self.closed_reason or reason
        for pending in list(self._pending.values()):
            if not pending.future.done():
                pending.future.set_result(CallOutcome(False, error=error_record(kind, reason)))

    async def close(
        self,
        reason: str,
        code: int = WSCloseCode.POLICY_VIOLATION,
        kind: ErrorKind = ErrorKind.WORKER_GONE,
    ) -> None:
        """Close the socket saying why; its calls fail with that reason, as ``kind``."""
        self.fail_all(reason, kind)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.ws.close(code=code, message=reason.encode()[:120])
        log.info("worker.closed", worker=self.name, worker_id=self.id, reason=reason)
        farewell, self._farewell, self.away = self._farewell, None, False
        if farewell is not None:
            farewell()
