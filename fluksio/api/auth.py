"""Who is asking: the bearer token of a request, read here and judged by the engine."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.engine.front.callers import Caller, Scheme

__all__ = ["authorize", "bearer_token"]


def authorize(request: web.Request, scheme: Scheme, *, allow_query: bool = False) -> Caller:
    """The caller of a route declared with ``scheme``; 401 or 403 when it may not call it
    (:data:`~fluksio.engine.front.callers.Scheme` says who may)."""
    if scheme == "none":  # nothing to ask: a route open to anyone needs no engine
        return Caller()
    return request.app[ENGINE].caller(scheme, bearer_token(request, allow_query=allow_query))


def bearer_token(request: web.Request, *, allow_query: bool = False) -> str | None:
    """The token from ``Authorization: Bearer``, or ``?token=`` where that is allowed;
    None when there is none.

    The query form exists because the published agent sends its token that way on the
    attach socket; the access log never records query strings for this reason.
    """
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if allow_query and request.query.get("token"):
        return request.query["token"]
    return None
