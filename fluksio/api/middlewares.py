"""Request ids, the access log, and the one place errors become HTTP answers.

Every error answer is JSON with a ``detail`` sentence. Unexpected exceptions are logged
with the request id and answered 500 without internals.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from fluksio.api.appkeys import CREDENTIAL_THROTTLE, ENGINE
from fluksio.api.responses import model_response
from fluksio.errors import (
    ConfigError,
    Conflict,
    FluksioError,
    Forbidden,
    InvalidInput,
    NotAuthenticated,
    NotFound,
    StorageFull,
    StoreAway,
    TooLarge,
    TooManyAttempts,
)
from fluksio.logs import get_logger
from fluksio.wire.answers.resources import ErrorBody

__all__ = ["credential_throttle_middleware", "error_middleware", "request_context_middleware"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = get_logger(__name__)

_STATUS: tuple[tuple[type[FluksioError], int], ...] = (
    (NotAuthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (TooLarge, 413),
    (InvalidInput, 422),
    (TooManyAttempts, 429),
    (StorageFull, 507),
    (StoreAway, 503),
    (ConfigError, 400),
)
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _status_of(error: FluksioError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def _json_error(status: int, detail: str, field: str | None = None) -> web.Response:
    body = ErrorBody(detail=detail, field=field)
    return model_response(body, status=status, exclude_none=True)


@web.middleware
async def request_context_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Bind a request id to every log line of this request and log one access line.

    The access line names the path only: query strings may carry a token.
    """
    offered = request.headers.get("X-Request-ID", "")
    request_id = offered if _CLIENT_REQUEST_ID.match(offered) else uuid.uuid4().hex
    engine = request.app[ENGINE]
    started = engine.monotonic()
    status = 500
    with structlog.contextvars.bound_contextvars(request_id=request_id):
        try:
            response = await handler(request)
            status = response.status
            if not response.prepared:
                response.headers["X-Request-ID"] = request_id
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            # The client went away (or the engine stops) mid-answer: nginx's "closed
            # request", not a server error.
            status = 499
            raise
        finally:
            log.info(
                "http.request",
                method=request.method,
                path=request.path,
                status=status,
                duration_ms=round((engine.monotonic() - started) * 1000, 2),
                remote=request.remote,
            )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except FluksioError as error:
        status = _status_of(error)
        if status >= 500:
            log.error("request.failed", error=error.detail)
        headers: dict[str, str] = {}
        field = error.field if isinstance(error, InvalidInput) else None
        if isinstance(error, TooManyAttempts):
            headers["Retry-After"] = str(max(1, round(error.retry_after)))
        if isinstance(error, NotAuthenticated):
            headers["WWW-Authenticate"] = "Bearer"
        if isinstance(error, StoreAway):
            headers["Retry-After"] = "2"  # a database restarting is back within seconds
        response = _json_error(status, error.detail, field)
        response.headers.update(headers)
        return response
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        if exc.status == 413:  # aiohttp's, for a JSON body over --client-max-size
            return _json_error(413, _body_too_large(request), "body")
        detail = exc.reason if exc.status != 404 else f"no such endpoint: {request.path}"
        response = _json_error(exc.status, detail)
        response.headers.update({k: v for k, v in exc.headers.items() if k == "Allow"})
        return response
    except Exception:
        log.exception("request.crashed")
        return _json_error(500, "internal error; the engine log has the details")


def _body_too_large(request: web.Request) -> str:
    """A JSON body over the engine's limit, said with the limit, what moves it and what to
    do instead."""
    limit = request.app[ENGINE].settings.client_max_size
    return (
        f"the request's body is over {limit} bytes, the most the engine takes in one JSON"
        " body (fluksio serve --client-max-size moves it); send large data as an artifact"
        " (PUT /api/v1/artifacts, referred to by its digest), and many calls in more than"
        " one request"
    )


@web.middleware
async def credential_throttle_middleware(
    request: web.Request, handler: Handler
) -> web.StreamResponse:
    """Failed credentials slow their client down, on every endpoint that takes a token.

    A request presenting a bearer token (or ``?token=``, the published agent's way on the
    attach socket) that is refused counts as a failure of its client's address; after
    the free ones, that address waits a doubling delay before a token it presents is
    looked at again (429 with ``Retry-After``), unless that token was verified before (a
    session in use there goes on). The login form has its own guard, by username too.
    """
    presented = _presented(request)
    if presented is None:
        return await handler(request)
    throttle = request.app[CREDENTIAL_THROTTLE]
    address = request.remote or "unknown"
    wait = throttle.retry_after(address, request.app[ENGINE].monotonic())
    if wait > 0 and not request.app[ENGINE].known_token(presented):
        raise TooManyAttempts(
            f"too many refused credentials from this address; try again in {max(1, round(wait))} s",
            retry_after=wait,
        )
    try:
        return await handler(request)
    except NotAuthenticated:
        throttle.failed(address, request.app[ENGINE].monotonic())
        raise


def _presented(request: web.Request) -> str | None:
    """The credential a request presents (as sent, unverified), if any."""
    header = request.headers.get("Authorization")
    if header is not None:
        return header.partition(" ")[2].strip()
    return request.query.get("token")
