"""Personal API tokens, each user's own, for their scripts (``$FLUKSIO_TOKEN``).

``POST /api/v1/tokens`` {name, days}       mint one for yourself, shown once (any user)
``GET /api/v1/tokens``                     your tokens, never their text (any user)
``POST /api/v1/tokens/{id}/revoke``        revoke one of yours (a superuser: anyone's);
                                           refused from the next request on
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.engine.answers import personal_token_body
from fluksio.engine.errors import NotFound
from fluksio.engine.logging import get_logger
from fluksio.wire.answers.tokens import MintedPersonalToken, PersonalTokenBody
from fluksio.wire.requests import PersonalTokenRequest

__all__ = ["routes"]

log = get_logger(__name__)
routes = Routes()


@routes.post(
    "/tokens",
    summary="Mint a personal API token for yourself (its text is in this answer only)",
    auth="user",
    answer=MintedPersonalToken,
    status=201,
    body=PersonalTokenRequest,
    errors=(422,),
)
async def _mint(call: Call[PersonalTokenRequest]) -> MintedPersonalToken:
    engine = call.app[ENGINE]
    user = call.user
    token, record = engine.personal_tokens.mint(user.username, call.body.name, call.body.days)
    log.info("personal_token.minted", id=record.id, name=record.name, user=user.username)
    body = personal_token_body(record, engine.clock.now())
    return MintedPersonalToken(token=token, **body.model_dump())


@routes.get(
    "/tokens",
    summary="Your personal API tokens, never their text",
    auth="user",
    answer=PersonalTokenBody,
    many=True,
)
async def _list(call: Call[None]) -> list[PersonalTokenBody]:
    engine = call.app[ENGINE]
    now = engine.clock.now()
    return [personal_token_body(r, now) for r in engine.personal_tokens.of(call.user.username)]


@routes.post(
    "/tokens/{token_id}/revoke",
    summary="Revoke a personal API token: refused from the next request on",
    auth="user",
    answer=PersonalTokenBody,
    errors=(404,),
)
async def _revoke(call: Call[None]) -> PersonalTokenBody:
    engine = call.app[ENGINE]
    token_id = call.request.match_info["token_id"]
    found = engine.personal_tokens.get(token_id)
    # Another user's token is as unknown to a user as one that does not exist.
    if found is None or (found.username != call.user.username and not call.user.is_superuser):
        raise NotFound(f"no personal token of yours with id {token_id!r}")
    record = engine.personal_tokens.revoke(token_id) or found
    log.info("personal_token.revoked", id=record.id, name=record.name, user=record.username)
    return personal_token_body(record, engine.clock.now())
