"""``GET /api/v1/workers/attach``: the WebSocket a worker dials in on (protocol 2).

The token (``Authorization: Bearer`` or ``?token=``, as the published agent sends it) is
verified before the upgrade, so a bad token is an HTTP 401 with a sentence. Then the first
frame must be a ``hello`` within ``hello_timeout_s``: another protocol is ``refused`` with
what to upgrade (and the worker is listed as needing an upgrade), labels the token does
not sign are ``refused``; otherwise ``welcome``, and the worker's calls flow until the
socket closes. A malformed frame closes that socket with a reason and affects nothing
else.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from typing import Any
from urllib.parse import urlsplit

from aiohttp import WSCloseCode, WSMsgType, web
from pydantic import ValidationError

from fluksio.agent.frames import (
    CONTROL_FRAME_BYTES,
    AnswerFrame,
    CancelFrame,
    HelloFrame,
    RefusedFrame,
    StoreOffer,
    WelcomeFrame,
    encode,
)
from fluksio.agent.outcome import ErrorKind
from fluksio.api.appkeys import ENGINE
from fluksio.api.bodies import parse_json
from fluksio.clock import Clock
from fluksio.engine.dispatch import Dispatcher
from fluksio.engine.errors import Forbidden
from fluksio.engine.logging import get_logger
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.workers.budget import FrameBudget
from fluksio.engine.workers.protocol import (
    CLOSE_SUPERSEDED,
    FrameError,
    is_unreadable,
    parse_hello,
    parse_worker_frame,
    protocol_refusal,
)
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.engine.workers.registry import display_name
from fluksio.engine.workers.session import WorkerSession
from fluksio.engine.workers.socket import CountedSocket
from fluksio.engine.workers.watch import ping_every_s
from fluksio.names import is_name
from fluksio.provisioners.base import WorkerRecord
from fluksio.scheduler import Worker
from fluksio.validation import one_sentence

__all__ = ["attach"]

log = get_logger(__name__)
ARTIFACT_TOKEN_TTL_S = 24 * 3600
"""How long a call may use its artifact token: as long as a batch job may reasonably run."""


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _refuse(ws: CountedSocket, reason: str) -> None:
    await ws.send_str(encode(RefusedFrame(reason=reason)))
    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=reason.encode()[:120])


async def _hello(request: web.Request, ws: CountedSocket, token: WorkerIdentity) -> HelloFrame:
    settings = request.app[ENGINE].settings
    try:
        message = await ws.receive(timeout=settings.worker_hello_timeout_s)
    except TimeoutError:
        raise _Refused(
            f"no hello within {settings.worker_hello_timeout_s:g} s of connecting"
        ) from None
    if message.type != WSMsgType.TEXT:
        raise _Refused("the first frame must be a JSON hello")
    if len(message.data) > CONTROL_FRAME_BYTES:
        raise _Refused(
            f"a hello of {len(message.data)} bytes; frames other than a call's answer are"
            f" at most {CONTROL_FRAME_BYTES} bytes"
        )
    try:
        raw: Any = parse_json(message.data)
    except ValueError as exc:
        raise _Refused(f"the first frame {exc}; it must be a JSON hello") from None
    if not isinstance(raw, dict) or raw.get("op") != "hello":
        raise _Refused('the first frame must be {"op": "hello", ...}')
    protocol = raw.get("protocol")
    reason = protocol_refusal(protocol)
    if reason is not None:
        # Kept until the worker attaches or the engine restarts, so only bounded fields
        # are: a name by the name rule (else the token's), short texts, a number.
        hello_name = raw.get("name")
        name = hello_name if isinstance(hello_name, str) and is_name(hello_name) else token.name
        request.app[ENGINE].workers.refused_for_protocol(
            NeedsUpgrade(
                name=display_name(token.name, name),
                protocol=protocol if type(protocol) is int and 0 <= protocol < 1000 else None,
                version=_text(raw.get("version"), 32),
                python=_text(raw.get("python"), 256),
                refused_at=request.app[ENGINE].clock.now(),
                reason=reason,
                jti=token.jti,
            )
        )
        raise _Refused(reason)
    try:
        hello = parse_hello(raw)
    except ValidationError as exc:
        raise _Refused(f"malformed hello: {one_sentence(exc, whole='hello')}") from None
    except FrameError as exc:
        raise _Refused(f"malformed hello: {exc}") from None
    unsigned = sorted(set(hello.labels) - set(token.labels))
    if unsigned:
        signed = ", ".join(token.labels) or "no labels"
        raise _Refused(
            f"labels {', '.join(unsigned)} are not signed by this worker's token (it signs"
            f" {signed}); mint a token with them or drop them from --labels"
        )
    return hello


def _text(value: object, limit: int) -> str | None:
    """A hello's text field as kept: a string, cut to ``limit`` characters."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 3] + "..."


def _check_origin(request: web.Request) -> None:
    """A browser says which page opened a socket: only the engine's own pages may.

    Agents send no ``Origin``; a page elsewhere that holds a worker token (pasted, or
    leaked) must not be able to attach through a visitor's browser.
    """
    origin = request.headers.get("Origin")
    if origin is None:
        return
    parsed = urlsplit(origin)
    if parsed.netloc != request.host:
        raise Forbidden(
            f"a page at {origin} may not open the attach socket; workers attach directly"
        )


async def attach(request: web.Request, token: WorkerIdentity) -> web.StreamResponse:
    """The socket of one worker, whose token ``token`` verified, from hello to close."""
    _check_origin(request)
    settings = request.app[ENGINE].settings
    # No aiohttp heartbeat: it would close a silent worker after 1.5 pings, long before the
    # 90-second rule. Liveness is one rule (the watcher's, worker_gone_s); the engine's own
    # pings only keep a healthy idle worker's last_seen fresh.
    response = web.WebSocketResponse(
        max_msg_size=settings.max_frame_bytes,
        compress=False,  # results are often already compressed; the CPU is better spent
        autoping=False,
        # Text frames stay bytes: the JSON parser reads (and checks) UTF-8 itself, so a
        # large answer is not copied once more into a str first.
        decode_text=False,
    )
    await response.prepare(request)
    registry = request.app[ENGINE].workers
    ws = CountedSocket(response, registry.frames)
    try:
        hello = await _hello(request, ws, token)
    except _Refused as refused:
        log.info("worker.refused", worker=token.name, reason=refused.reason)
        await _refuse(ws, refused.reason)
        return response

    name = display_name(token.name, hello.name)
    dispatcher = request.app[ENGINE].dispatcher
    away = registry.by_identity((token.jti, hello.name))
    if away is not None and away.away and hello.resume is not None:
        await _come_back(request, away, ws, hello)
        return response
    session = WorkerSession(
        id=f"w{secrets.token_hex(6)}",
        name=name,
        identity=(token.jti, hello.name),
        token=token,
        key_id=request.app[ENGINE].tokens.current_key_id(),
        hello=hello,
        ws=ws,
        clock=request.app[ENGINE].clock,
        take_within_s=settings.worker_take_s,
    )
    tokens = request.app[ENGINE].tokens
    session.mint_artifact_token = lambda: tokens.mint_artifact(
        name, parent_jti=token.jti, ttl_s=ARTIFACT_TOKEN_TTL_S
    )
    superseded = registry.add(session)
    if superseded is not None:
        await superseded.close(
            "superseded by a newer connection of the same worker", code=CLOSE_SUPERSEDED
        )
    await _welcome(request, session)
    # Calls it held for a connection this engine no longer knows (it restarted, or the
    # 90-second rule ended them): it is told to drop them, so none runs on unseen.
    for call_id in hello.resume or ():
        await _send_cancel(session, call_id)
    inventory = hello.inventory
    job = _job_of(dispatcher, token)
    if job is not None:
        session.batch_job = " ".join(job)
    event = _event(session, job[1] if job is not None else None)
    dispatcher.worker_attached(
        Worker(
            id=session.id,
            name=name,
            labels=frozenset(hello.labels),
            slots=hello.max_parallel,
            cpus=inventory.cpus,
            gpus=inventory.gpus,
            ram_mb=inventory.ram_mb,
            ends_at=hello.ends_at,
        ),
        session,
        event,
    )
    log.info(
        "worker.attached",
        worker=name,
        worker_id=session.id,
        labels=hello.labels,
        parallel=hello.max_parallel,
        version=hello.version or "0.1.x",
    )
    await _connected(request, session, event)
    return response


async def _come_back(
    request: web.Request, session: WorkerSession, ws: CountedSocket, hello: HelloFrame
) -> None:
    """A worker that was away attached again: the same session carries on over ``ws``."""
    dropped = session.come_back(ws, hello)
    await _welcome(request, session)
    for call_id in dropped:
        await _send_cancel(session, call_id)
    request.app[ENGINE].dispatcher.set_answering(session.id, True)
    log.info(
        "worker.back", worker=session.name, worker_id=session.id, calls=len(hello.resume or ())
    )
    job = _job_of(request.app[ENGINE].dispatcher, session.token)
    await _connected(request, session, _event(session, job[1] if job else None))


async def _connected(request: web.Request, session: WorkerSession, event: WorkerRecord) -> None:
    """Serve the session's socket until it ends; then the worker is gone, or away."""
    settings = request.app[ENGINE].settings
    registry = request.app[ENGINE].workers
    dispatcher = request.app[ENGINE].dispatcher
    clock = request.app[ENGINE].clock
    ws = session.ws
    budget = FrameBudget(settings.worker_frames_per_s, settings.frame_burst, clock.monotonic)
    pinger = asyncio.get_running_loop().create_task(_ping(session, ping_every_s(settings), clock))

    def farewell() -> None:
        registry.remove(session)
        session.fail_all("worker went away mid-call")
        dispatcher.worker_gone(event, session.closed_reason)
        log.info(
            "worker.detached",
            worker=session.name,
            worker_id=session.id,
            reason=session.closed_reason or "disconnected",
        )

    try:
        await _serve(session, budget, settings.max_frame_bytes)
    finally:
        pinger.cancel()
        if session.ws is ws and session.may_come_back():
            # Its relay dropped, not the worker: its calls wait for it (the 90-s rule).
            session.go_away(farewell)
            dispatcher.set_answering(session.id, False)
            log.info("worker.away", worker=session.name, worker_id=session.id)
        elif session.ws is ws:
            farewell()


async def _welcome(request: web.Request, session: WorkerSession) -> None:
    store = request.app[ENGINE].artifacts
    probe, nonce = store.probe()
    # (ours) Where the store is, and a file only a worker sharing this filesystem can read:
    # such a worker's calls use the store directly instead of HTTP. Never assumed.
    shared = StoreOffer(path=str(store.root), probe=probe, nonce=nonce)
    public = request.app[ENGINE].settings.public_url
    artifacts = f"{public}/api/v1/artifacts" if public is not None else None
    await session.ws.send_str(
        encode(WelcomeFrame(name=session.name, store=shared, artifacts=artifacts, logs=True))
    )


async def _send_cancel(session: WorkerSession, call_id: str) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        await session.ws.send_str(encode(CancelFrame(call_id=call_id)))


def _job_of(dispatcher: Dispatcher, token: WorkerIdentity) -> tuple[str, str] | None:
    """The job a provisioned worker's request runs as (its noun and id), if known."""
    provisioned = token.provisioned_by
    if provisioned is None or dispatcher.provisioning is None:
        return None
    return dispatcher.provisioning.job_of(*provisioned)


def _event(session: WorkerSession, job_id: str | None = None) -> WorkerRecord:
    """What the provisioning driver and the worker hooks are told of it; ``job_id``: its
    request's job, where the worker did not say (only a Slurm job's worker does)."""
    provisioned = session.token.provisioned_by
    provisioner, profile, request_id = provisioned if provisioned else (None, None, None)
    return WorkerRecord(
        worker_id=session.id,
        name=session.name,
        labels=tuple(session.hello.labels),
        provisioner=provisioner,
        profile=profile,
        request_id=request_id,
        job_id=session.hello.slurm_job_id or job_id,
        ends_at=session.hello.ends_at,
    )


async def _ping(session: WorkerSession, every_s: float, clock: Clock) -> None:
    """Ping the worker now and then; its pong (or any frame) is a sign of life."""
    while not session.ws.closed:
        await clock.sleep(every_s)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await session.ws.ping()


_LEADING_CALL_ID = re.compile(rb'\A\s*\{\s*"call_id"\s*:\s*"([A-Za-z0-9_.:-]{1,128})"')
_PEEK_ABOVE_BYTES = 64 * 1024
"""A frame this large is first checked for a call this worker was sent, before parsing."""


def _unexpected_call(session: WorkerSession, data: bytes) -> str | None:
    """The call id a large frame leads with, when no call of that id is in flight here.

    Parsing a large answer costs twice its size again; one that no call waits for (a late
    answer after a limit, or one made up) is dropped unread instead. Our agent and the
    published one both write ``call_id`` first; a frame that does not is parsed as usual.
    """
    if len(data) <= _PEEK_ABOVE_BYTES:
        return None
    match = _LEADING_CALL_ID.match(data[:256])
    if match is None:
        return None
    call_id = match.group(1).decode()
    return None if session.expects(call_id) else call_id


async def _serve(session: WorkerSession, budget: FrameBudget, max_frame_bytes: int) -> None:
    async for message in session.ws:
        if not budget.spend():
            await session.close(
                "flooding: more frames a second than any worker needs; disconnected",
                code=WSCloseCode.POLICY_VIOLATION,
            )
            return
        if message.type == WSMsgType.TEXT:
            data = message.data
            del message  # a large answer's text is held once, and not past its parsing
            unexpected = _unexpected_call(session, data)
            if unexpected is not None:
                session.unknown(unexpected, f"answer of {len(data)} bytes, unread")
                continue
            size = len(data)
            try:
                frame = parse_worker_frame(data)
            except (ValidationError, FrameError) as exc:
                await _malformed(session, exc)
                return
            del data
            if size > CONTROL_FRAME_BYTES and not isinstance(frame, AnswerFrame):
                session.oversized(frame.call_id, frame.event, size)
                continue
            session.handle(frame)
            del frame
        elif message.type == WSMsgType.BINARY:
            await session.close("frames are JSON text", code=WSCloseCode.UNSUPPORTED_DATA)
            return
        elif message.type == WSMsgType.ERROR:
            await _unreadable(session, message.data, max_frame_bytes)
            return
        elif message.type == WSMsgType.PING:
            session.touch()
            with contextlib.suppress(ConnectionError, RuntimeError):
                await session.ws.pong(message.data)
        else:
            session.touch()


async def _malformed(session: WorkerSession, exc: ValidationError | FrameError) -> None:
    """Close the socket of a worker that sent a frame it should not have, saying why."""
    if isinstance(exc, ValidationError) and is_unreadable(exc):
        # 1007: the frame's text itself is unusable (no JSON, nested too deeply).
        reason = f"a frame is not usable JSON: {exc.errors()[0]['msg']}"
        await session.close(reason[:120], code=WSCloseCode.INVALID_TEXT)
        return
    detail = one_sentence(exc, whole="frame") if isinstance(exc, ValidationError) else str(exc)
    await session.close(f"malformed frame: {detail}"[:200], code=WSCloseCode.UNSUPPORTED_DATA)


async def _unreadable(session: WorkerSession, error: object, max_frame_bytes: int) -> None:
    """aiohttp reads a frame whole before handing it over; past ``--max-frame-bytes`` it
    stops and says so. Then the calls in flight fail naming the size, not as a lost
    worker (that would retry them, to the same end)."""
    if getattr(error, "code", None) == WSCloseCode.MESSAGE_TOO_BIG:
        reason = (
            f"the worker sent a frame larger than the engine's --max-frame-bytes"
            f" ({max_frame_bytes} bytes); a result that large must be saved as an artifact"
        )
        await session.close(
            reason, code=WSCloseCode.MESSAGE_TOO_BIG, kind=ErrorKind.FRAME_TOO_LARGE
        )
    else:
        await session.close(f"the worker's frames could not be read ({error})")
