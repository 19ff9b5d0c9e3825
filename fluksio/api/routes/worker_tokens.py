"""Worker tokens: mint (shown once), list, revoke; and ``self`` for a worker to check its own.

``POST /workers/tokens`` {name, labels} -> token, jti, name, labels, expires_at (superuser)
``GET /workers/tokens``                  -> the records, never token text (superuser)
``POST /workers/tokens/{jti}/revoke``    -> the record, revoked (idempotent; superuser)
``GET /workers/tokens/self``             -> what the presented worker token signs
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes, View
from fluksio.wire.answers.tokens import MintedToken, OwnToken, WorkerTokenBody
from fluksio.wire.requests import WorkerTokenRequest
from fluksio.wire.times import utc

__all__ = ["routes"]

routes = Routes()


@routes.post(
    "/workers/tokens",
    auth="superuser",
    answer=MintedToken,
    status=201,
    body=WorkerTokenRequest,
    errors=(422,),
)
async def _mint(call: Call[WorkerTokenRequest]) -> MintedToken:
    """Mint a worker token (its text is in this answer only)"""
    body, by = call.body, call.superuser.username
    return call.app[ENGINE].mint_worker_token(body.name, body.labels, by=by)


@routes.get("/workers/tokens", auth="superuser", answer=WorkerTokenBody, many=True, view=True)
async def _list(call: Call[None]) -> View:
    """Every worker token, never its text"""
    return View(call.app[ENGINE].worker_token_list)


@routes.get("/workers/tokens/self", auth="worker", answer=OwnToken)
async def _self(call: Call[None]) -> OwnToken:
    """What the presented worker token signs"""
    identity = call.worker
    return OwnToken(
        name=identity.name,
        labels=list(identity.labels),
        jti=identity.jti,
        expires_at=utc(identity.expires_at),
    )


@routes.post(
    "/workers/tokens/{jti}/revoke", auth="superuser", answer=WorkerTokenBody, errors=(404,)
)
async def _revoke(call: Call[None]) -> WorkerTokenBody:
    """Revoke a worker token; workers using it are disconnected at once"""
    jti, by = call.request.match_info["jti"], call.superuser.username
    return await call.app[ENGINE].revoke_worker_token(jti, by=by)
