"""Who is asking: the bearer token of a request, verified by the token service."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from fluksio.api.appkeys import ENGINE
from fluksio.engine.scrape_tokens import PREFIX as SCRAPE_PREFIX
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.users import User
from fluksio.errors import Forbidden, NotAuthenticated

__all__ = [
    "Caller",
    "authorize",
    "bearer_token",
    "require_superuser",
    "require_user",
    "require_worker",
]


@dataclass(frozen=True)
class Caller:
    """Who a request came from, as far as its route's scheme asks."""

    user: User | None = None
    worker: WorkerIdentity | None = None
    described: str = "anyone"
    """For the log: ``user ada``, ``worker gpu-1``, ``a scrape token``."""


def authorize(request: web.Request, scheme: str, *, allow_query: bool = False) -> Caller:
    """The caller of a route declared with ``scheme``; 401 or 403 when it may not call it.

    ``none`` anyone; ``user`` any user's access token; ``superuser`` a superuser's;
    ``worker`` a worker token; ``artifact`` a worker token, a call's artifact token or a
    user's access token; ``scrape`` a scrape token or a superuser's access token.
    """
    if scheme == "none":
        return Caller()
    if scheme in ("user", "superuser"):
        user = require_superuser(request) if scheme == "superuser" else require_user(request)
        return Caller(user=user, described=f"user {user.username}")
    if scheme == "worker":
        identity = require_worker(request, allow_query=allow_query)
        return Caller(worker=identity, described=f"worker {identity.name}")
    if scheme == "artifact":
        tokens = request.app[ENGINE].tokens
        return Caller(described=tokens.verify_artifact_access(bearer_token(request)))
    if scheme == "scrape":
        token = bearer_token(request)
        if not token.startswith(SCRAPE_PREFIX):
            user = require_superuser(request)
            return Caller(user=user, described=f"user {user.username}")
        if not request.app[ENGINE].scrape_tokens.valid(token):
            raise NotAuthenticated("the scrape token is unknown or revoked")
        return Caller(described="a scrape token")
    raise ValueError(f"no authentication scheme {scheme!r}")


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
    return request.app[ENGINE].tokens.verify_access(bearer_token(request))


def require_superuser(request: web.Request) -> User:
    user = require_user(request)
    if not user.is_superuser:
        raise Forbidden(f"user {user.username!r} is not a superuser")
    return user


def require_worker(request: web.Request, *, allow_query: bool = False) -> WorkerIdentity:
    return request.app[ENGINE].tokens.verify_worker(bearer_token(request, allow_query=allow_query))
