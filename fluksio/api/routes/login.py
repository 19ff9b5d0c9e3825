"""``POST /login/access-token``: form fields ``username`` and ``password``, a bearer token back.

Unknown user and wrong password get the same answer in the same time; repeated failures
for a username or from an address are slowed down (429 with ``Retry-After``).
"""

from __future__ import annotations

from pydantic import BaseModel

from fluksio.api.appkeys import ENGINE, LOGIN_GUARD
from fluksio.api.declare import Call, Routes
from fluksio.errors import NotAuthenticated, TooManyAttempts
from fluksio.wire.answers.tokens import AccessToken

__all__ = ["routes"]


class LoginForm(BaseModel):
    """The form (``application/x-www-form-urlencoded``), as OAuth2's password flow has it;
    each field is required."""

    username: str
    password: str


routes = Routes()


@routes.post(
    "/login/access-token", auth="none", answer=AccessToken, form=LoginForm, errors=(401, 422, 429)
)
async def _access_token(call: Call[LoginForm]) -> AccessToken:
    """Log in: a bearer access token for a username and password"""
    request = call.request
    username, password = call.body.username, call.body.password

    guard, engine = request.app[LOGIN_GUARD], request.app[ENGINE]
    address = request.remote or "unknown"
    wait = guard.retry_after(username, address, engine.monotonic())
    if wait > 0:
        raise TooManyAttempts(
            f"too many failed logins; try again in {max(1, round(wait))} s", retry_after=wait
        )

    token = await engine.log_in(username, password)
    if token is None:
        guard.failed(username, address, engine.monotonic())
        raise NotAuthenticated("incorrect username or password")
    guard.succeeded(username, address)
    return AccessToken(access_token=token)
