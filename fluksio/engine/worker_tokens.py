"""What the engine remembers of each worker token it minted (never the token itself)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database, placeholders

__all__ = ["WorkerTokenRecord", "WorkerTokenStore"]


@dataclass(frozen=True)
class WorkerTokenRecord:
    jti: str
    name: str
    labels: tuple[str, ...]
    created_at: float
    expires_at: float
    created_by: str | None
    revoked_at: float | None
    revoked_reason: str | None

    def status(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "active"


def _record(row: Any) -> WorkerTokenRecord:
    return WorkerTokenRecord(
        jti=row["jti"],
        name=row["name"],
        labels=tuple(json.loads(row["labels"])),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        created_by=row["created_by"],
        revoked_at=row["revoked_at"],
        revoked_reason=row["revoked_reason"],
    )


class WorkerTokenStore:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock

    def add(self, record: WorkerTokenRecord) -> None:
        self._db.execute(
            "INSERT INTO worker_tokens (jti, name, labels, created_at, expires_at, created_by)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (
                record.jti,
                record.name,
                json.dumps(list(record.labels)),
                record.created_at,
                record.expires_at,
                record.created_by,
            ),
        )

    def get(self, jti: str) -> WorkerTokenRecord | None:
        row = self._db.execute("SELECT * FROM worker_tokens WHERE jti = ?", (jti,)).fetchone()
        return None if row is None else _record(row)

    def unusable(self, jtis: set[str]) -> set[str]:
        """Those of ``jtis`` that are revoked or unknown here, in one query: the watcher
        asks for every attached worker every few seconds."""
        if not jtis:
            return set()
        rows = self._db.execute(
            "SELECT jti FROM worker_tokens"  # noqa: S608 (only placeholders are put in)
            f" WHERE revoked_at IS NULL AND jti IN ({placeholders(len(jtis))})",
            sorted(jtis),
        )
        return jtis - {row["jti"] for row in rows}

    def list(self) -> list[WorkerTokenRecord]:
        rows = self._db.execute("SELECT * FROM worker_tokens ORDER BY created_at, jti")
        return [_record(row) for row in rows]

    def revoke(self, jti: str, reason: str) -> WorkerTokenRecord | None:
        """Revoke one token (a second revoke keeps the first time and reason)."""
        self._db.execute(
            "UPDATE worker_tokens SET revoked_at = ?, revoked_reason = ?"
            " WHERE jti = ? AND revoked_at IS NULL",
            (self._clock.now(), reason, jti),
        )
        return self.get(jti)

    def revoke_all(self, reason: str) -> int:
        cursor = self._db.execute(
            "UPDATE worker_tokens SET revoked_at = ?, revoked_reason = ? WHERE revoked_at IS NULL",
            (self._clock.now(), reason),
        )
        return cursor.rowcount
