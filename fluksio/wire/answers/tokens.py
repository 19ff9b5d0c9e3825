"""Tokens as the API shows them: access, worker, scrape and personal tokens (a token's text only in
the answer that minted it)."""

from __future__ import annotations

from datetime import datetime

from fluksio.wire.answers.base import Answer


class AccessToken(Answer):
    access_token: str
    token_type: str = "bearer"  # noqa: S105 - the OAuth2 token type, not a secret


class WorkerTokenBody(Answer):
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


class OwnToken(Answer):
    name: str
    labels: list[str]
    jti: str
    expires_at: datetime


class ScrapeTokenBody(Answer):
    id: str
    name: str
    status: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class MintedScrapeToken(ScrapeTokenBody):
    """The one answer that holds the token's text: put it in Prometheus's
    ``authorization.credentials_file``."""

    token: str


class PersonalTokenBody(Answer):
    id: str
    name: str
    status: str
    """``active``, ``revoked`` or ``expired``."""
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None


class MintedPersonalToken(PersonalTokenBody):
    """The one answer that holds the token's text: give it to the script as
    ``$FLUKSIO_TOKEN``."""

    token: str
