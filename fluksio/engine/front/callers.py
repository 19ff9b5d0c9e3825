"""Who is asking: a bearer token and the scheme a route declares, answered by the engine.

A part of :class:`~fluksio.engine.front.engine.Engine`. The front door reads the token from the
request and asks :meth:`CallersAsked.caller`; a login form's username and password are
checked by :meth:`CallersAsked.log_in`. What a token means, and who may call what, is
decided here, beside the tokens, users and scrape tokens it is read against.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fluksio.engine.scrape_tokens import PREFIX as SCRAPE_PREFIX
from fluksio.engine.tokens import WorkerIdentity
from fluksio.engine.users import User, check_password
from fluksio.errors import Forbidden, NotAuthenticated
from fluksio.logs import get_logger

if TYPE_CHECKING:
    from fluksio.engine.scrape_tokens import ScrapeTokenStore
    from fluksio.engine.tokens import TokenService
    from fluksio.engine.users import UserStore

__all__ = ["Caller", "CallersAsked", "Scheme", "User", "WorkerIdentity"]

log = get_logger("fluksio.engine.login")

Scheme = Literal["none", "user", "superuser", "worker", "artifact", "scrape"]
"""Who may call a route: anyone; any user's access token; a superuser's; a worker token;
a worker token, a call's artifact token or a user's access token; a scrape token or a
superuser's access token."""


@dataclass(frozen=True)
class Caller:
    """Who a request came from, as far as its route's scheme asks."""

    user: User | None = None
    worker: WorkerIdentity | None = None
    described: str = "anyone"
    """For the log: ``user ada``, ``worker gpu-1``, ``a scrape token``."""
    call_id: str | None = None
    """The call whose own artifact credential it presented (what it uploads is its own)."""


class CallersAsked:
    def __init__(
        self,
        *,
        tokens: TokenService,
        users: UserStore,
        scrape_tokens: ScrapeTokenStore,
    ) -> None:
        self._tokens = tokens
        self._users = users
        self._scrape_tokens = scrape_tokens

    def caller(self, scheme: Scheme, token: str | None) -> Caller:
        """The caller a ``token`` (None: none presented) is for a route of ``scheme``;
        :class:`NotAuthenticated` or :class:`Forbidden` when it may not call it."""
        if scheme == "none":
            return Caller()
        if token is None:
            raise NotAuthenticated(
                "this endpoint needs a bearer token: Authorization: Bearer <token>"
            )
        if scheme == "worker":
            identity = self._tokens.verify_worker(token)
            return Caller(worker=identity, described=f"worker {identity.name}")
        if scheme == "artifact":
            described, call_id = self._tokens.verify_artifact_access(token)
            return Caller(described=described, call_id=call_id)
        if scheme == "scrape" and token.startswith(SCRAPE_PREFIX):
            if not self._scrape_tokens.valid(token):
                raise NotAuthenticated("the scrape token is unknown or revoked")
            return Caller(described="a scrape token")
        user = self._tokens.verify_access(token)
        if scheme != "user" and not user.is_superuser:
            raise Forbidden(f"user {user.username!r} is not a superuser")
        return Caller(user=user, described=f"user {user.username}")

    def known_token(self, token: str) -> bool:
        """Whether ``token`` was verified here already (a session in use): a throttled
        address's known-good tokens are not held up with the guesses."""
        return self._tokens.verified_before(token)

    async def log_in(self, username: str, password: str) -> str | None:
        """A new access token when ``password`` is ``username``'s; None otherwise.

        The hash is checked off the event loop (it is slow on purpose), with the same work
        for an unknown username."""
        found = self._users.credentials(username)
        loop = asyncio.get_running_loop()
        user = await loop.run_in_executor(None, check_password, found, password)
        if user is None:
            log.info("login.failed", username=username)
            return None
        log.info("login.succeeded", username=user.username)
        return self._tokens.mint_access(user)
