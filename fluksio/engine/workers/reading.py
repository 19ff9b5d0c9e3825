"""Reading one worker's socket: its hello, then every frame, counted and bounded, until
it closes. The front door (:mod:`fluksio.api.attach`) verifies the token, opens the socket
and puts this module's :class:`FrameJudge` before its reader; who is let in and what
follows is :mod:`fluksio.engine.workers.connections`' and the session's.

A malformed frame closes that socket with a reason and affects nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from typing import TYPE_CHECKING, Any, NamedTuple

from aiohttp import WSCloseCode, WSMsgType
from pydantic import ValidationError

from fluksio.agent.protocol.frames import (
    CONTROL_FRAME_BYTES,
    AnswerFrame,
    CacheFrame,
    HelloFrame,
    RefusedFrame,
    StoppingFrame,
    encode,
)
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Clock
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.workers.budget import FrameBudget
from fluksio.engine.workers.connections import Refusal, WorkerConnections
from fluksio.engine.workers.protocol import (
    FrameError,
    is_unreadable,
    parse_hello,
    parse_worker_frame,
)
from fluksio.engine.workers.session import WorkerSession
from fluksio.engine.workers.socket import CountedSocket, FrameCounts
from fluksio.engine.workers.watch import ping_every_s
from fluksio.logs import get_logger
from fluksio.validation import one_sentence, parse_json

if TYPE_CHECKING:
    from fluksio.engine.settings import EngineSettings

__all__ = ["PEEK_ABOVE_BYTES", "FrameJudge", "PassedOver", "read_worker"]

log = get_logger(__name__)


async def read_worker(
    ws: CountedSocket,
    token: WorkerIdentity,
    judge: FrameJudge,
    *,
    connections: WorkerConnections,
    settings: EngineSettings,
    clock: Clock,
) -> None:
    """The socket of one worker, whose token verified, from its hello to its close."""
    try:
        hello = await _hello(ws, connections, token, settings.worker_hello_timeout_s, judge)
        session, socket = await connections.admit(token, hello, ws)
    except Refusal as refused:
        log.info("worker.refused", worker=token.name, reason=refused.reason)
        await _refuse(ws, refused.reason)
        return
    judge.session = session
    budget = FrameBudget(settings.worker_frames_per_s, settings.frame_burst, clock.monotonic)
    pinger = asyncio.get_running_loop().create_task(_ping(ws, ping_every_s(settings), clock))
    try:
        await _serve(session, ws, budget, settings.max_frame_bytes, judge)
    finally:
        pinger.cancel()
        session.socket_ended(socket)


async def _refuse(ws: CountedSocket, reason: str) -> None:
    await ws.send_str(encode(RefusedFrame(reason=reason)))
    await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=reason.encode()[:120])


async def _hello(
    ws: CountedSocket,
    connections: WorkerConnections,
    token: WorkerIdentity,
    timeout_s: float,
    gate: FrameJudge,
) -> HelloFrame:
    """The first frame, read and decoded as a hello; else :class:`Refusal` says why."""
    try:
        message = await ws.receive(timeout=timeout_s)
    except TimeoutError:
        raise Refusal(f"no hello within {timeout_s:g} s of connecting") from None
    if message.type != WSMsgType.TEXT:
        raise Refusal("the first frame must be a JSON hello")
    passed_over = gate.passed_over(message.data)
    if passed_over is not None and passed_over.size <= CONTROL_FRAME_BYTES:
        raise Refusal('the first frame must be {"op": "hello", ...}')  # it named a call
    size = passed_over.size if passed_over is not None else len(message.data)
    if size > CONTROL_FRAME_BYTES:
        raise Refusal(
            f"a hello of {size} bytes; frames other than a call's answer are"
            f" at most {CONTROL_FRAME_BYTES} bytes"
        )
    try:
        raw: Any = parse_json(message.data)
    except ValueError as exc:
        raise Refusal(f"the first frame {exc}; it must be a JSON hello") from None
    if not isinstance(raw, dict) or raw.get("op") != "hello":
        raise Refusal('the first frame must be {"op": "hello", ...}')
    connections.check_protocol(token, raw)
    try:
        return parse_hello(raw)
    except ValidationError as exc:
        raise Refusal(f"malformed hello: {one_sentence(exc, whole='hello')}") from None
    except FrameError as exc:
        raise Refusal(f"malformed hello: {exc}") from None


async def _ping(ws: CountedSocket, every_s: float, clock: Clock) -> None:
    """Ping the worker now and then; its pong (or any frame) is a sign of life."""
    while not ws.closed:
        await clock.sleep(every_s)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.ping()


_LEADING_CALL_ID = re.compile(rb'\A\s*\{\s*"call_id"\s*:\s*"([A-Za-z0-9_.:-]{1,128})"')
PEEK_ABOVE_BYTES = 64 * 1024
"""A frame this large is judged by its first bytes before it is read whole (or, in the
pieces of a fragmented message, parsed)."""
_LEADING_KEY = re.compile(rb'\s*,\s*"(\w{1,32})"(?:\s*:\s*"(\w{1,32})")?')
"""After the call id: the next key (``event`` in an event, never in an answer) and its
value, when a word."""


class PassedOver(NamedTuple):
    """A large frame passed over unread: it named no call in flight, or it was over 1 MiB
    and not a call's answer."""

    size: int
    call_id: str | None
    """The call it named first, if any."""
    event: str | None
    """Its ``event``, when it named a call in flight (then it is an event, not an answer)."""


class FrameJudge:
    """Which large frames of one worker are read whole: what names a call in flight (its
    answer; an event, up to 1 MiB), and a frame of 1 MiB at most that names no call (it is
    parsed, and refused, as usual). The rest are passed over as they arrive, each replaced
    by a stand-in that only this socket's gate can write (it starts with a mark made for
    it)."""

    def __init__(self, counts: FrameCounts) -> None:
        self.session: WorkerSession | None = None
        self._counts = counts
        self._mark = b"\0" + secrets.token_hex(16).encode()

    def __call__(self, lead: bytes, size: int) -> bytes | None:
        call_id = event = None
        found = _LEADING_CALL_ID.match(lead)
        if found is None and size <= CONTROL_FRAME_BYTES:
            return None
        if found is not None:
            call_id = found.group(1).decode()
            after = _LEADING_KEY.match(lead, found.end())
            if self.session is not None and self.session.expects(call_id):
                if after is None or after.group(1) != b"event" or size <= CONTROL_FRAME_BYTES:
                    return None  # its answer (or what cannot be told apart), or an event
                event = (after.group(2) or b"event").decode()  # within bounds: read whole
        self._counts.passed_over += 1
        return self._mark + json.dumps(PassedOver(size, call_id, event)._asdict()).encode()

    def passed_over(self, data: bytes) -> PassedOver | None:
        """What a stand-in says, or None for a frame as the worker sent it."""
        if not data.startswith(self._mark):
            return None
        return PassedOver(**json.loads(data[len(self._mark) :]))


def _unexpected_call(session: WorkerSession, data: bytes) -> str | None:
    """The call id a large message leads with, when no call of that id is in flight here:
    the gate's rule, for a message that came in pieces (a fragmented one, which the gate
    passes on; neither agent sends one).

    Parsing a large answer costs twice its size again; one that no call waits for (a late
    answer after a limit, or one made up) is dropped unread instead. Our agent and the
    published one both write ``call_id`` first; a frame that does not is parsed as usual.
    """
    if len(data) <= PEEK_ABOVE_BYTES:
        return None
    match = _LEADING_CALL_ID.match(data[:256])
    if match is None:
        return None
    call_id = match.group(1).decode()
    return None if session.expects(call_id) else call_id


async def _serve(
    session: WorkerSession,
    ws: CountedSocket,
    budget: FrameBudget,
    max_frame_bytes: int,
    judge: FrameJudge,
) -> None:
    async for message in ws:
        if not budget.spend():
            await session.close(
                "flooding: more frames a second than any worker needs; disconnected",
                code=WSCloseCode.POLICY_VIOLATION,
            )
            return
        if message.type == WSMsgType.TEXT:
            data = message.data
            del message  # a large answer's text is held once, and not past its parsing
            unread = await _unread(session, data, judge)
            if unread is not None:
                if unread:
                    continue
                return
            size = len(data)
            try:
                frame = parse_worker_frame(data)
            except (ValidationError, FrameError) as exc:
                await _malformed(session, exc)
                return
            del data
            if isinstance(frame, CacheFrame | StoppingFrame):
                session.told(frame)
                continue
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
            await session.confirm(message.data)
        else:
            session.touch()


async def _unread(session: WorkerSession, data: bytes, judge: FrameJudge) -> bool | None:
    """A frame left unparsed, told to the session: a stand-in for one passed over as it
    arrived, or a large one (of a fragmented message) naming a call not in flight. None:
    parse it; True: read on; False: the socket is closed for it (a large frame naming no
    call at all)."""
    frame = judge.passed_over(data)
    if frame is None:
        unexpected = _unexpected_call(session, data)
        if unexpected is not None:
            session.unknown(unexpected, f"answer of {len(data)} bytes, unread")
            return True
        return None
    if frame.call_id is None:
        said = (
            f"a frame of {frame.size} bytes that names no call; frames other than a call's"
            f" answer are at most {CONTROL_FRAME_BYTES} bytes"
        )
        await session.close(said, code=WSCloseCode.MESSAGE_TOO_BIG)
        return False
    if frame.event is not None:
        session.oversized(frame.call_id, frame.event, frame.size)
    else:
        session.unknown(frame.call_id, f"answer of {frame.size} bytes, unread")
    return True


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
