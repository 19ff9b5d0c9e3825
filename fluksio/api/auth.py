"""Who is asking: the bearer token of a request, verified by the token service."""

from __future__ import annotations

from aiohttp import web

from fluksio.api.appkeys import TOKENS
from fluksio.engine.errors import Forbidden, NotAuthenticated
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.users import User

__all__ = ["bearer_token", "require_superuser", "require_worker"]


def bearer_token(request: web.Request, *, allow_query: bool = False) -> str:
    """The token from ``Authorization: Bearer``, or ``?token=`` where that is allowed.

    The query form exists because the published agent sends its token that way on the
    attach socket; the access log never records query strings for this reason.
    """
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if allow_query and request.query.get("token"):
        return request.query["token"]
    raise NotAuthenticated("this endpoint needs a bearer token: Authorization: Bearer <token>")


def require_user(request: web.Request) -> User:
    return request.app[TOKENS].verify_access(bearer_token(request))


def require_superuser(request: web.Request) -> User:
    user = require_user(request)
    if not user.is_superuser:
        raise Forbidden(f"user {user.username!r} is not a superuser")
    return user


def require_worker(request: web.Request, *, allow_query: bool = False) -> WorkerIdentity:
    return request.app[TOKENS].verify_worker(bearer_token(request, allow_query=allow_query))
