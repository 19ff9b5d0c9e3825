"""Personal API tokens: what a user's scripts present instead of a password.

A user mints one for themself, with a name and an expiry; its text (``fpt_`` and 43
characters) is shown once. The engine keeps only its SHA-256 digest, so a copy of the
database holds no usable token. Each request looks the token up, so one revoked (by its
user or a superuser), expired, or whose user was removed, is refused from the next
request on. It speaks with its user's role, as the user's access token would.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.errors import NotAuthenticated

__all__ = ["PREFIX", "PersonalTokenRecord", "PersonalTokenStore"]

PREFIX = "fpt_"
LONGEST_DAYS = 365


@dataclass(frozen=True)
class PersonalTokenRecord:
    id: str
    username: str
    name: str
    created_at: float
    expires_at: float
    revoked_at: float | None

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= now else "active"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _record(row: Any) -> PersonalTokenRecord:
    return PersonalTokenRecord(
        row["id"],
        row["username"],
        row["name"],
        row["created_at"],
        row["expires_at"],
        row["revoked_at"],
    )


class PersonalTokenStore:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock

    def mint(self, username: str, name: str, days: int) -> tuple[str, PersonalTokenRecord]:
        """A new token's text (never stored) and its record, valid for ``days``."""
        token = PREFIX + secrets.token_urlsafe(32)
        now = self._clock.now()
        record = PersonalTokenRecord(
            secrets.token_hex(8), username, name, now, now + days * 86400.0, None
        )
        self._db.execute(
            "INSERT INTO personal_tokens (id, username, name, digest, created_at, expires_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (record.id, username, name, _digest(token), now, record.expires_at),
        )
        return token, record

    def username_of(self, token: str) -> str:
        """Whose token ``token`` is, or :class:`NotAuthenticated` saying why not."""
        row = self._db.execute(
            "SELECT * FROM personal_tokens WHERE digest = ?", (_digest(token),)
        ).fetchone()
        if row is None:
            raise NotAuthenticated("this personal token is unknown to this engine")
        record = _record(row)
        status = record.status(self._clock.now())
        if status != "active":
            raise NotAuthenticated(f"personal token {record.name!r} is {status}")
        return record.username

    def of(self, username: str) -> list[PersonalTokenRecord]:
        rows = self._db.execute(
            "SELECT * FROM personal_tokens WHERE username = ? ORDER BY created_at", (username,)
        )
        return [_record(row) for row in rows]

    def get(self, token_id: str) -> PersonalTokenRecord | None:
        row = self._db.execute("SELECT * FROM personal_tokens WHERE id = ?", (token_id,)).fetchone()
        return _record(row) if row is not None else None

    def revoke(self, token_id: str) -> PersonalTokenRecord | None:
        """Revoke it (again is no change); None when there is no such token."""
        self._db.execute(
            "UPDATE personal_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (self._clock.now(), token_id),
        )
        return self.get(token_id)
