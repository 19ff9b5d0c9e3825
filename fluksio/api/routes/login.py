"""``POST /login/access-token``: form fields ``username`` and ``password``, a bearer token back.

Unknown user and wrong password get the same answer in the same time; repeated failures
for a username or from an address are slowed down (429 with ``Retry-After``).
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from fluksio.api.appkeys import ENGINE, LOGIN_GUARD
from fluksio.api.declare import Call, Routes
from fluksio.engine.users import check_password
from fluksio.errors import NotAuthenticated, TooManyAttempts
from fluksio.logs import get_logger
from fluksio.wire.answers.tokens import AccessToken

__all__ = ["routes"]

log = get_logger(__name__)


class LoginForm(BaseModel):
    """The form (``application/x-www-form-urlencoded``), as OAuth2's password flow has it;
    each field is required."""

    username: str
    password: str


routes = Routes()


@routes.post(
    "/login/access-token",
    summary="Log in: a bearer access token for a username and password",
    auth="none",
    answer=AccessToken,
    form=LoginForm,
    errors=(401, 422, 429),
)
async def _access_token(call: Call[LoginForm]) -> AccessToken:
    request = call.request
    username, password = call.body.username, call.body.password

    guard = request.app[LOGIN_GUARD]
    address = request.remote or "unknown"
    wait = guard.retry_after(username, address, request.app[ENGINE].clock.monotonic())
    if wait > 0:
        raise TooManyAttempts(
            f"too many failed logins; try again in {max(1, round(wait))} s", retry_after=wait
        )

    found = request.app[ENGINE].users.credentials(username)
    user = await asyncio.get_running_loop().run_in_executor(None, check_password, found, password)
    if user is None:
        guard.failed(username, address, request.app[ENGINE].clock.monotonic())
        log.info("login.failed", username=username)
        raise NotAuthenticated("incorrect username or password")
    guard.succeeded(username, address)
    log.info("login.succeeded", username=user.username)
    token = request.app[ENGINE].tokens.mint_access(user)
    return AccessToken(access_token=token)
