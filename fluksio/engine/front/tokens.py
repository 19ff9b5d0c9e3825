"""What a client asks the engine of tokens and secrets, answered with the wire's models.

A part of :class:`~fluksio.engine.front.engine.Engine`: minting and revoking worker, personal and
scrape tokens (a token's text is in the minting answer only; a worker token's changes go
out on the engine's stream, and its workers are disconnected when it is revoked), and
keeping secrets (a value never comes back). Each is a route's whole business with the
engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fluksio.engine.answers import (
    personal_token_body,
    scrape_token_body,
    secret_body,
    worker_token_body,
    worker_token_fields,
)
from fluksio.engine.stream import TokenMinted, TokenRevoked
from fluksio.errors import NotFound
from fluksio.logs import get_logger
from fluksio.wire.answers.resources import Deleted, SecretBody
from fluksio.wire.answers.tokens import (
    MintedPersonalToken,
    MintedScrapeToken,
    MintedToken,
    PersonalTokenBody,
    ScrapeTokenBody,
    WorkerTokenBody,
)

if TYPE_CHECKING:
    from fluksio.clock import Clock
    from fluksio.engine.personal_tokens import PersonalTokenStore
    from fluksio.engine.scrape_tokens import ScrapeTokenStore
    from fluksio.engine.secrets import SecretStore
    from fluksio.engine.stream import EngineStream
    from fluksio.engine.tokens import TokenService
    from fluksio.engine.worker_tokens import WorkerTokenStore
    from fluksio.engine.workers.registry import WorkerRegistry

__all__ = ["TokensAsked"]

log = get_logger("fluksio.engine.tokens")


class TokensAsked:
    def __init__(
        self,
        *,
        clock: Clock,
        stream: EngineStream,
        tokens: TokenService,
        worker_tokens: WorkerTokenStore,
        personal_tokens: PersonalTokenStore,
        scrape_tokens: ScrapeTokenStore,
        secrets: SecretStore,
        workers: WorkerRegistry,
    ) -> None:
        self._clock = clock
        self.stream = stream
        self._tokens = tokens
        self._worker_tokens = worker_tokens
        self._personal_tokens = personal_tokens
        self._scrape_tokens = scrape_tokens
        self._secrets = secrets
        self.workers = workers

    # -- worker tokens -------------------------------------------------------------------

    def mint_worker_token(self, name: str, labels: list[str], *, by: str) -> MintedToken:
        minted = self._tokens.mint_worker(name, tuple(labels), created_by=by)
        log.info("worker_token.minted", jti=minted.record.jti, name=name, labels=labels)
        fields = worker_token_fields(minted.record, self._clock.now())
        shown = WorkerTokenBody.model_validate(fields)
        self.stream.emit(TokenMinted(shown.model_dump(mode="json")))
        return MintedToken.model_validate({"token": minted.token, **fields})

    def worker_token_list(self) -> list[WorkerTokenBody]:
        now = self._clock.now()
        return [worker_token_body(record, now) for record in self._worker_tokens.list()]

    async def revoke_worker_token(self, jti: str, *, by: str) -> WorkerTokenBody:
        """Revoke it: its workers are disconnected at once."""
        record = self._worker_tokens.revoke(jti, f"revoked by {by}")
        if record is None:
            raise NotFound(f"no worker token with jti {jti!r}")
        log.info("worker_token.revoked", jti=jti, name=record.name)
        described = worker_token_body(record, self._clock.now())
        self.stream.emit(TokenRevoked(described.model_dump(mode="json")))
        for session in self.workers.with_jti(jti):
            await session.close("the worker token was revoked")
        return described

    # -- personal API tokens -------------------------------------------------------------

    def mint_personal_token(self, username: str, name: str, days: int) -> MintedPersonalToken:
        token, record = self._personal_tokens.mint(username, name, days)
        log.info("personal_token.minted", id=record.id, name=record.name, user=username)
        body = personal_token_body(record, self._clock.now())
        return MintedPersonalToken(token=token, **body.model_dump())

    def personal_token_list(self, username: str) -> list[PersonalTokenBody]:
        now = self._clock.now()
        return [personal_token_body(r, now) for r in self._personal_tokens.of(username)]

    def revoke_personal_token(
        self, token_id: str, *, username: str, superuser: bool
    ) -> PersonalTokenBody:
        """Revoke one of ``username``'s tokens (a superuser's: anyone's)."""
        found = self._personal_tokens.get(token_id)
        # Another user's token is as unknown to a user as one that does not exist.
        if found is None or (found.username != username and not superuser):
            raise NotFound(f"no personal token of yours with id {token_id!r}")
        record = self._personal_tokens.revoke(token_id) or found
        log.info("personal_token.revoked", id=record.id, name=record.name, user=record.username)
        return personal_token_body(record, self._clock.now())

    # -- scrape tokens -------------------------------------------------------------------

    def mint_scrape_token(self, name: str, *, by: str) -> MintedScrapeToken:
        token, record = self._scrape_tokens.mint(name, created_by=by)
        log.info("scrape_token.minted", id=record.id, name=record.name)
        return MintedScrapeToken(token=token, **scrape_token_body(record).model_dump())

    def scrape_token_list(self) -> list[ScrapeTokenBody]:
        return [scrape_token_body(record) for record in self._scrape_tokens.list()]

    def revoke_scrape_token(self, token_id: str) -> ScrapeTokenBody:
        record = self._scrape_tokens.revoke(token_id)
        if record is None:
            raise NotFound(f"no scrape token with id {token_id!r}")
        log.info("scrape_token.revoked", id=record.id, name=record.name)
        return scrape_token_body(record)

    # -- secrets -------------------------------------------------------------------------

    def put_secret(self, name: str, value: str, labels: list[str]) -> SecretBody:
        return secret_body(self._secrets.put(name, value, labels))

    def secret_list(self) -> list[SecretBody]:
        return [secret_body(info) for info in self._secrets.list()]

    def delete_secret(self, name: str) -> Deleted:
        if not self._secrets.delete(name):
            raise NotFound(f"no secret named {name!r}")
        return Deleted(deleted=name)
