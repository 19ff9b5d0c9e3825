"""Personal API tokens, each user's own, for their scripts (``$FLUKSIO_TOKEN``).

``POST /api/v1/tokens`` {name, days}       mint one for yourself, shown once (any user)
``GET /api/v1/tokens``                     your tokens, never their text (any user)
``POST /api/v1/tokens/{id}/revoke``        revoke one of yours (a superuser: anyone's);
                                           refused from the next request on
"""

from __future__ import annotations

from fluksio.api.appkeys import ENGINE
from fluksio.api.declare import Call, Routes
from fluksio.wire.answers.tokens import MintedPersonalToken, PersonalTokenBody
from fluksio.wire.requests import PersonalTokenRequest

__all__ = ["routes"]

routes = Routes()


@routes.post(
    "/tokens",
    auth="user",
    answer=MintedPersonalToken,
    status=201,
    body=PersonalTokenRequest,
    errors=(422,),
)
async def _mint(call: Call[PersonalTokenRequest]) -> MintedPersonalToken:
    """Mint a personal API token for yourself (its text is in this answer only)"""
    body = call.body
    return call.app[ENGINE].mint_personal_token(call.user.username, body.name, body.days)


@routes.get("/tokens", auth="user", answer=PersonalTokenBody, many=True)
async def _list(call: Call[None]) -> list[PersonalTokenBody]:
    """Your personal API tokens, never their text"""
    return call.app[ENGINE].personal_token_list(call.user.username)


@routes.post("/tokens/{token_id}/revoke", auth="user", answer=PersonalTokenBody, errors=(404,))
async def _revoke(call: Call[None]) -> PersonalTokenBody:
    """Revoke a personal API token: refused from the next request on"""
    user = call.user
    return call.app[ENGINE].revoke_personal_token(
        call.request.match_info["token_id"], username=user.username, superuser=user.is_superuser
    )
