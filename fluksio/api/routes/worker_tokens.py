"""Worker tokens: mint (shown once), list, revoke; and ``self`` for a worker to check its own.

``POST /workers/tokens`` {name, labels} -> token, jti, name, labels, expires_at (superuser)
``GET /workers/tokens``                  -> the records, never token text (superuser)
``POST /workers/tokens/{jti}/revoke``    -> the record, revoked (idempotent; superuser)
``GET /workers/tokens/self``             -> what the presented worker token signs
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes, View
from fluksio.engine.answers import worker_token_body, worker_token_fields
from fluksio.engine.errors import NotFound
from fluksio.engine.logging import get_logger
from fluksio.engine.stream import TokenMinted, TokenRevoked
from fluksio.wire.answers.tokens import MintedToken, OwnToken, WorkerTokenBody
from fluksio.wire.requests import WorkerTokenRequest
from fluksio.wire.times import utc

__all__ = ["routes"]

log = get_logger(__name__)
routes = Routes()


@routes.post(
    "/workers/tokens",
    summary="Mint a worker token (its text is in this answer only)",
    auth="superuser",
    answer=MintedToken,
    status=201,
    body=WorkerTokenRequest,
    errors=(422,),
)
async def _mint(call: Call[WorkerTokenRequest]) -> MintedToken:
    body = call.body
    minted = call.app[ENGINE].tokens.mint_worker(
        body.name, tuple(body.labels), created_by=call.superuser.username
    )
    log.info("worker_token.minted", jti=minted.record.jti, name=body.name, labels=body.labels)
    fields = worker_token_fields(minted.record, call.app[ENGINE].clock.now())
    answer = MintedToken.model_validate({"token": minted.token, **fields})
    shown = WorkerTokenBody.model_validate(fields).model_dump(mode="json")
    call.app[ENGINE].stream.emit(TokenMinted(shown))
    return answer


@routes.get(
    "/workers/tokens",
    summary="Every worker token, never its text",
    auth="superuser",
    answer=WorkerTokenBody,
    many=True,
    view=True,
)
async def _list(call: Call[None]) -> View:
    now = call.app[ENGINE].clock.now()
    records = call.app[ENGINE].worker_tokens.list()
    return View(lambda: [worker_token_body(r, now) for r in records])


@routes.get(
    "/workers/tokens/self",
    summary="What the presented worker token signs",
    auth="worker",
    answer=OwnToken,
)
async def _self(call: Call[None]) -> OwnToken:
    identity = call.worker
    return OwnToken(
        name=identity.name,
        labels=list(identity.labels),
        jti=identity.jti,
        expires_at=utc(identity.expires_at),
    )


@routes.post(
    "/workers/tokens/{jti}/revoke",
    summary="Revoke a worker token; workers using it are disconnected at once",
    auth="superuser",
    answer=WorkerTokenBody,
    errors=(404,),
)
async def _revoke(call: Call[None]) -> WorkerTokenBody:
    jti = call.request.match_info["jti"]
    record = call.app[ENGINE].worker_tokens.revoke(jti, f"revoked by {call.superuser.username}")
    if record is None:
        raise NotFound(f"no worker token with jti {jti!r}")
    log.info("worker_token.revoked", jti=jti, name=record.name)
    described = worker_token_body(record, call.app[ENGINE].clock.now())
    call.app[ENGINE].stream.emit(TokenRevoked(described.model_dump(mode="json")))
    for session in call.app[ENGINE].workers.with_jti(jti):
        await session.close("the worker token was revoked")
    return described
