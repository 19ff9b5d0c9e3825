"""Worker tokens: mint (shown once), list, revoke; and ``self`` for a worker to check its own.

``POST /workers/tokens`` {name, labels} -> token, jti, name, labels, expires_at (superuser)
``GET /workers/tokens``                  -> the records, never token text (superuser)
``POST /workers/tokens/{jti}/revoke``    -> the record, revoked (idempotent; superuser)
``GET /workers/tokens/self``             -> what the presented worker token signs
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web
from pydantic import BaseModel

from fluksio.api.appkeys import CLOCK, ENGINE_EVENTS, TOKENS, WORKER_TOKENS, WORKERS
from fluksio.api.auth import require_superuser, require_worker
from fluksio.api.bodies import read_json
from fluksio.api.openapi import Operation, documented
from fluksio.api.responses import model_response
from fluksio.api.routes.views import view_response
from fluksio.api.timefmt import utc
from fluksio.engine.engine_events import TokenMinted, TokenRevoked
from fluksio.engine.errors import NotFound
from fluksio.engine.logging import get_logger
from fluksio.engine.models import WorkerTokenRequest
from fluksio.engine.worker_tokens import WorkerTokenRecord

__all__ = ["routes"]

log = get_logger(__name__)


class WorkerTokenBody(BaseModel):
    """What the engine remembers of a worker token: never the token text."""

    jti: str
    name: str
    labels: list[str]
    status: str
    created_at: datetime
    created_by: str
    expires_at: datetime
    revoked_at: datetime | None
    revoked_reason: str | None


class MintedToken(WorkerTokenBody):
    """The one answer that holds the token text: shown once, never stored."""

    token: str


class OwnToken(BaseModel):
    name: str
    labels: list[str]
    jti: str
    expires_at: datetime


def _fields(record: WorkerTokenRecord, now: float) -> dict[str, object]:
    return {
        "jti": record.jti,
        "name": record.name,
        "labels": list(record.labels),
        "status": record.status(now),
        "created_at": utc(record.created_at),
        "created_by": record.created_by,
        "expires_at": utc(record.expires_at),
        "revoked_at": utc(record.revoked_at),
        "revoked_reason": record.revoked_reason,
    }


def _describe(record: WorkerTokenRecord, now: float) -> WorkerTokenBody:
    return WorkerTokenBody.model_validate(_fields(record, now))


@documented(
    Operation(
        summary="Mint a worker token (its text is in this answer only)",
        auth="superuser",
        answer=MintedToken,
        status=201,
        body=WorkerTokenRequest,
        errors=(422,),
    )
)
async def _mint(request: web.Request) -> web.Response:
    user = require_superuser(request)
    body = await read_json(request, WorkerTokenRequest)
    minted = request.app[TOKENS].mint_worker(
        body.name, tuple(body.labels), created_by=user.username
    )
    log.info("worker_token.minted", jti=minted.record.jti, name=body.name, labels=body.labels)
    fields = _fields(minted.record, request.app[CLOCK].now())
    answer = MintedToken.model_validate({"token": minted.token, **fields})
    shown = WorkerTokenBody.model_validate(fields).model_dump(mode="json")
    request.app[ENGINE_EVENTS].emit(TokenMinted(shown))
    return model_response(answer, status=201)


@documented(
    Operation(
        summary="Every worker token, never its text",
        auth="superuser",
        answer=WorkerTokenBody,
        many=True,
        other_answers={304: "Unchanged since the ETag sent in If-None-Match."},
    )
)
async def _list(request: web.Request) -> web.Response:
    require_superuser(request)
    now = request.app[CLOCK].now()
    records = request.app[WORKER_TOKENS].list()
    return view_response(request, lambda: model_response([_describe(r, now) for r in records]))


@documented(
    Operation(
        summary="Revoke a worker token; workers using it are disconnected at once",
        auth="superuser",
        answer=WorkerTokenBody,
        errors=(404,),
    )
)
async def _revoke(request: web.Request) -> web.Response:
    user = require_superuser(request)
    jti = request.match_info["jti"]
    record = request.app[WORKER_TOKENS].revoke(jti, f"revoked by {user.username}")
    if record is None:
        raise NotFound(f"no worker token with jti {jti!r}")
    log.info("worker_token.revoked", jti=jti, name=record.name)
    described = _describe(record, request.app[CLOCK].now())
    request.app[ENGINE_EVENTS].emit(TokenRevoked(described.model_dump(mode="json")))
    for session in request.app[WORKERS].with_jti(jti):
        await session.close("the worker token was revoked")
    return model_response(described)


@documented(
    Operation(
        summary="What the presented worker token signs",
        auth="worker",
        answer=OwnToken,
    )
)
async def _self(request: web.Request) -> web.Response:
    identity = require_worker(request)
    return model_response(
        OwnToken(
            name=identity.name,
            labels=list(identity.labels),
            jti=identity.jti,
            expires_at=utc(identity.expires_at),
        )
    )


def routes(prefix: str) -> list[web.RouteDef]:
    return [
        web.post(f"{prefix}/workers/tokens", _mint),
        web.get(f"{prefix}/workers/tokens", _list),
        web.get(f"{prefix}/workers/tokens/self", _self),
        web.post(f"{prefix}/workers/tokens/{{jti}}/revoke", _revoke),
    ]
