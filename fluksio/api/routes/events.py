"""``GET /events``: the engine's live feed as server-sent events.

Each event has an ``id``, a kind (``event:``) and one line of JSON (``data:``):

``run.state``        {run_id, flow, state}
``call.state``       {run_id, flow, node, call_id, state, place}
``call.progress``    {run_id, flow, node, call_id, events}: a running call reported events
``call.log``         {run_id, flow, node, call_id, attempt, first, lines, missed}: lines it
                     wrote (at most 200 an event, twice a second; the rest by GET /runs/ID/logs)
``worker.attached``  {worker}  (as ``GET /workers`` shows one), and ``worker.changed``
``worker.gone``      {id, name, reason}
``worker.refused``   {worker}  (a worker refused for its protocol)
``queue``            {queued}  (as ``GET /workers/resources`` shows it), when it changes
``provisioning``     {provisioners}, when it changes
``token.minted``     {token}, and ``token.revoked`` (never the token's text): to a
                     superuser only, as listing worker tokens is

A stream opens with ``ready`` {last_id}. Sent ``Last-Event-ID`` (the header a browser's
``EventSource`` sends on reconnecting, or ``?last_event_id=``), it first replays every
event after that one; when those are gone (too far behind, or the engine restarted) it
sends ``refetch`` {reason} instead: fetch the views again, then read on. ``?run=ID``
keeps only that run's events. A comment line every 15 s keeps proxies from closing it.

A stream lives only as long as its credential: its access token is checked again every
few seconds, and once it no longer verifies (the signing key was rotated, the token
expired, the user was removed) the stream sends ``closed`` {reason} and ends; a user
who is no longer a superuser gets no more of a superuser's events.
"""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.api.auth import authorize
from fluksio.api.declare import Call, Param, Routes
from fluksio.engine.feed import FeedEvent, sse_frame
from fluksio.errors import Forbidden, InvalidInput, NotAuthenticated
from fluksio.wire.answers.feed import FEED_EVENTS

__all__ = ["routes"]

routes = Routes()

KEEPALIVE_S = 15.0
GONE_CHECK_S = 1.0
"""How soon a quiet stream notices its subscriber left (aiohttp tells a handler only when
it writes): the subscriber count and the buffer's reader then let go."""
RETRY_MS = 1000
CREDENTIAL_CHECK_S = 3.0
"""How often an open stream's access token is verified again (it ends within this, plus
the time to notice, once the token no longer verifies)."""


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


SUPERUSER_KINDS = frozenset({"token.minted", "token.revoked"})
"""What only a superuser's stream carries: it tells what only a superuser may list."""


def _credential(request: web.Request) -> tuple[str | None, bool]:
    """Why the stream's credential no longer holds (None while it does), and whether it
    is a superuser's."""
    try:
        user = authorize(request, "user").user
    except (NotAuthenticated, Forbidden) as exc:
        return str(exc), False
    return None, user is not None and user.is_superuser


def _selected(run_id: str | None, superuser: bool, event: FeedEvent) -> bool:
    if event.kind in SUPERUSER_KINDS and not superuser:
        return False
    return run_id is None or event.run_id == run_id


@routes.get(
    "/events",
    auth="user",
    media="text/event-stream",
    errors=(422,),
    params=(
        Param(
            "Last-Event-ID", "The last event id seen: replay what came after it.", where="header"
        ),
        Param("last_event_id", "The same, for a client that cannot set headers."),
        Param("run", "Only this run's events."),
    ),
    description=__doc__,
    events=FEED_EVENTS,
)
async def _events(call: Call[None]) -> web.StreamResponse:
    """The live feed: changes to runs, calls, workers, queue, provisioning (SSE)"""
    request = call.request
    feed = request.app[ENGINE].feed
    last = request.headers.get("Last-Event-ID") or request.query.get("last_event_id")
    try:
        position = feed.position(last)
    except ValueError as exc:
        raise InvalidInput("Last-Event-ID", str(exc)) from None
    run_id = request.query.get("run") or None
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            # nginx would otherwise hold events back until its buffer fills.
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    feed.subscribers += 1
    try:
        seq = position.seq
        opening = f"retry: {RETRY_MS}\n\n".encode()
        if position.refetch is not None:
            opening += sse_frame(feed.last_id, "refetch", {"reason": position.refetch})
        opening += sse_frame(f"{feed.epoch}.{seq}", "ready", {"last_id": f"{feed.epoch}.{seq}"})
        await response.write(opening)
        await _follow(request, response, seq, run_id, call.user.is_superuser)
    except (ConnectionError, RuntimeError):
        pass  # the subscriber went away
    finally:
        feed.subscribers -= 1
    return response


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    seq: int,
    run_id: str | None,
    superuser: bool,
) -> None:
    """Write the feed's events after ``seq`` as they come (a superuser's kinds only while
    the credential is a superuser's), until the engine closes, the subscriber leaves or
    its credential ends."""
    engine = request.app[ENGINE]
    feed = engine.feed
    quiet_s = 0.0
    checked_at = engine.monotonic()
    while not feed.closed:
        if engine.monotonic() - checked_at >= CREDENTIAL_CHECK_S:
            checked_at = engine.monotonic()
            reason, superuser = _credential(request)
            if reason is not None:
                await response.write(sse_frame(feed.last_id, "closed", {"reason": reason}))
                return
        if feed.fell_behind(seq):
            # Too slow to read what the engine says: skip to now, and say so.
            seq = feed.seq
            reason = "too far behind: events were lost while this stream lagged"
            await response.write(sse_frame(feed.last_id, "refetch", {"reason": reason}))
            continue
        events = feed.after(seq)
        if events:
            seq = events[-1].seq
            if superuser and any(e.kind in SUPERUSER_KINDS for e in events):
                # Rare, and asked again now: a superuser demoted a moment ago sees none.
                reason, superuser = _credential(request)
            chunk = b"".join(e.frame() for e in events if _selected(run_id, superuser, e))
            if chunk:
                await response.write(chunk)
        elif await feed.wait_after(seq, GONE_CHECK_S):
            quiet_s = 0.0
        elif _gone(request):
            return
        else:
            quiet_s += GONE_CHECK_S
            if quiet_s >= KEEPALIVE_S:
                quiet_s = 0.0
                await response.write(b": keepalive\n\n")
