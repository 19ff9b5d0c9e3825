"""``GET /api/v1/workers/attach``: the WebSocket a worker dials in on (protocol 2).

The token (``Authorization: Bearer`` or ``?token=``, as the published agent sends it) is
verified before the upgrade, so a bad token is an HTTP 401 with a sentence. Then the first
frame must be a ``hello`` within ``hello_timeout_s``: another protocol is ``refused`` with
what to upgrade (and the worker is listed as needing an upgrade), labels the token does
not sign are ``refused``; otherwise ``welcome``, and the worker's calls flow until the
socket closes. A malformed frame closes that socket with a reason and affects nothing
else.

This module is the door: it checks the page that opened the socket, opens it and puts
the engine's frame judge before aiohttp's reader. Reading the hello and every frame is the
engine's (:mod:`fluksio.engine.workers.reading`), and so is who is let in and what follows
(:mod:`fluksio.engine.workers.connections`, :mod:`fluksio.engine.workers.connection.machine`).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.api.frame_gate import FrameGate
from fluksio.engine.front.callers import WorkerIdentity
from fluksio.engine.workers.reading import PEEK_ABOVE_BYTES, FrameJudge
from fluksio.errors import Forbidden
from fluksio.logs import get_logger

__all__ = ["attach"]

log = get_logger(__name__)


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
    engine = request.app[ENGINE]
    max_frame_bytes = engine.settings.max_frame_bytes
    # No aiohttp heartbeat: it would close a silent worker after 1.5 pings, long before the
    # 90-second rule. Liveness is one rule (the connection machine's, worker_gone_s); the
    # engine's own pings only keep a healthy idle worker's last_seen fresh.
    response = web.WebSocketResponse(
        max_msg_size=max_frame_bytes,
        compress=False,  # results are often already compressed; the CPU is better spent
        autoping=False,
        # Text frames stay bytes: the JSON parser reads (and checks) UTF-8 itself, so a
        # large answer is not copied once more into a str first.
        decode_text=False,
    )
    judge = engine.frame_judge()
    await response.prepare(request)
    _gate_reading(request, judge, max_frame_bytes)
    await engine.serve_worker(token, response, judge)
    return response


def _gate_reading(request: web.Request, judge: FrameJudge, most: int) -> None:
    """Put a :class:`FrameGate` before the reader aiohttp gave the started socket, so that
    a large frame no call awaits is judged as it arrives, not held whole.

    aiohttp has no hook for it: the connection's ``_payload_parser`` is swapped (checked
    by a test, so that an aiohttp that changes it fails there, not in the field). Data a
    client sent before it had the handshake's answer reached the reader first; both
    agents wait for it, and one that does not garbles only its own socket.
    """
    protocol = request.protocol
    reader = getattr(protocol, "_payload_parser", None)
    if reader is None:
        log.warning("frames.ungated", reason="aiohttp's connection has no reader to gate")
        return
    protocol._payload_parser = FrameGate(reader, judge, above=PEEK_ABOVE_BYTES, most=most)
