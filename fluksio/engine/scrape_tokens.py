"""Scrape tokens: what a Prometheus server presents to read ``GET /metrics``, and no more.

A scrape token is random text (``fks_`` and 43 characters), shown once when minted. The
engine keeps only its SHA-256 digest, so a copy of the database cannot scrape; a token
proves nothing but the right to read the metrics, so one leaked from a Prometheus
configuration cannot start runs or mint worker tokens.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database

__all__ = ["PREFIX", "ScrapeTokenRecord", "ScrapeTokenStore"]

PREFIX = "fks_"


@dataclass(frozen=True)
class ScrapeTokenRecord:
    id: str
    name: str
    created_at: float
    created_by: str
    revoked_at: float | None

    @property
    def status(self) -> str:
        return "revoked" if self.revoked_at is not None else "active"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _record(row: Any) -> ScrapeTokenRecord:
    return ScrapeTokenRecord(
        row["id"], row["name"], row["created_at"], row["created_by"], row["revoked_at"]
    )


class ScrapeTokenStore:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock

    def mint(self, name: str, *, created_by: str) -> tuple[str, ScrapeTokenRecord]:
        """A new token's text (never stored) and its record."""
        token = PREFIX + secrets.token_urlsafe(32)
        record = ScrapeTokenRecord(secrets.token_hex(8), name, self._clock.now(), created_by, None)
        self._db.execute(
            "INSERT INTO scrape_tokens (id, name, digest, created_at, created_by)"
            " VALUES (?, ?, ?, ?, ?)",
            (record.id, name, _digest(token), record.created_at, created_by),
        )
        return token, record

    def valid(self, token: str) -> bool:
        """Whether ``token`` is a scrape token minted here and not revoked."""
        if not token.startswith(PREFIX):
            return False
        row = self._db.execute(
            "SELECT revoked_at FROM scrape_tokens WHERE digest = ?", (_digest(token),)
        ).fetchone()
        return row is not None and row["revoked_at"] is None

    def list(self) -> list[ScrapeTokenRecord]:
        rows = self._db.execute("SELECT * FROM scrape_tokens ORDER BY created_at")
        return [_record(row) for row in rows]

    def revoke(self, token_id: str) -> ScrapeTokenRecord | None:
        """Revoke it (again is no change); None when there is no such token."""
        self._db.execute(
            "UPDATE scrape_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (self._clock.now(), token_id),
        )
        row = self._db.execute("SELECT * FROM scrape_tokens WHERE id = ?", (token_id,)).fetchone()
        return _record(row) if row is not None else None
