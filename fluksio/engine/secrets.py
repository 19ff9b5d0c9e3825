"""Secrets: values encrypted at rest (AES-256-GCM), released only to calls allowed them.

A node refers to a secret in its params as ``{"$secret": "<name>"}``. The engine resolves
it for one call only where that call runs on the engine, or on a worker whose signed
labels include one of the secret's labels. Values never reach a log or a run record.
"""

from __future__ import annotations

import json
import secrets as random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.engine.key_places import KeyPlace
from fluksio.errors import FluksioError

__all__ = ["REPLACED_KEPT_S", "SecretDenied", "SecretInfo", "SecretStore", "resolve_params"]

REPLACED_KEPT_S = 7 * 24 * 3600.0
"""How long a replaced or deleted value is kept, encrypted, only to blank it in the output
of a call given it before (see :meth:`SecretStore.given_since`)."""


class SecretDenied(FluksioError):
    """A node asked for a secret it may not have where it runs (or that does not exist)."""


@dataclass(frozen=True)
class SecretInfo:
    name: str
    labels: tuple[str, ...]
    created_at: float
    updated_at: float


class SecretStore:
    def __init__(self, database: Database, keys: KeyPlace, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock
        key = keys.create_once("secrets", AESGCM.generate_key(bit_length=256))
        self._cipher = AESGCM(key)

    def put(self, name: str, value: str, labels: Iterable[str]) -> SecretInfo:
        nonce = random.token_bytes(12)
        sealed = self._cipher.encrypt(nonce, value.encode(), name.encode())
        now = self._clock.now()
        self._keep_replaced(name, now)
        self._db.execute(
            "INSERT INTO secrets (name, labels, nonce, ciphertext, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET labels = excluded.labels,"
            " nonce = excluded.nonce, ciphertext = excluded.ciphertext,"
            " updated_at = excluded.updated_at",
            (name, json.dumps(sorted(set(labels))), nonce, sealed, now, now),
        )
        info = self.info(name)
        assert info is not None
        return info

    def info(self, name: str) -> SecretInfo | None:
        row = self._db.execute(
            "SELECT name, labels, created_at, updated_at FROM secrets WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else _info(row)

    def list(self) -> list[SecretInfo]:
        rows = self._db.execute(
            "SELECT name, labels, created_at, updated_at FROM secrets ORDER BY name"
        )
        return [_info(row) for row in rows]

    def delete(self, name: str) -> bool:
        self._keep_replaced(name, self._clock.now())
        return self._db.execute("DELETE FROM secrets WHERE name = ?", (name,)).rowcount > 0

    def _keep_replaced(self, name: str, now: float) -> None:
        """The value ``name`` has now, kept (encrypted, for :data:`REPLACED_KEPT_S`) to be
        blanked in what calls given it print: one adopted after a restart is given it by no
        one the engine can ask again."""
        self._db.execute(
            "INSERT INTO secret_history (name, nonce, ciphertext, replaced_at)"
            " SELECT name, nonce, ciphertext, ? FROM secrets WHERE name = ?",
            (now, name),
        )
        self._db.execute(
            "DELETE FROM secret_history WHERE replaced_at < ?", (now - REPLACED_KEPT_S,)
        )

    def given_since(self, names: Iterable[str], since: float) -> tuple[str, ...]:
        """The values ``names`` had at any time since ``since``: the current (where one
        exists) and those replaced or deleted after it."""
        values: tuple[str, ...] = ()
        for name in set(names):
            rows = self._db.execute(
                "SELECT nonce, ciphertext FROM secrets WHERE name = ? UNION ALL"
                " SELECT nonce, ciphertext FROM secret_history"
                " WHERE name = ? AND replaced_at >= ?",
                (name, name, since),
            )
            for row in rows:
                opened = self._cipher.decrypt(row["nonce"], row["ciphertext"], name.encode())
                values += (opened.decode(),)
        return values

    def reveal(self, name: str, *, on_engine: bool, worker_labels: Iterable[str]) -> str:
        """The value of ``name`` for a call placed as described, or :class:`SecretDenied`."""
        row = self._db.execute(
            "SELECT labels, nonce, ciphertext FROM secrets WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise SecretDenied(f"secret {name!r} does not exist")
        labels = set(json.loads(row["labels"]))
        if not on_engine and not labels & set(worker_labels):
            allowed = ", ".join(sorted(labels)) or "none: engine only"
            raise SecretDenied(
                f"secret {name!r} is not released to this worker: its token signs none of"
                f" the secret's labels ({allowed})"
            )
        return self._cipher.decrypt(row["nonce"], row["ciphertext"], name.encode()).decode()


def _info(row: Any) -> SecretInfo:
    return SecretInfo(
        name=row["name"],
        labels=tuple(json.loads(row["labels"])),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def resolve_params(
    params: Mapping[str, Any], store: SecretStore, *, on_engine: bool, worker_labels: Iterable[str]
) -> dict[str, Any]:
    """``params`` with each ``{"$secret": name}`` replaced by the value, where allowed."""
    labels = tuple(worker_labels)
    resolved: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict) and set(value) == {"$secret"}:
            resolved[key] = store.reveal(
                value["$secret"], on_engine=on_engine, worker_labels=labels
            )
        else:
            resolved[key] = value
    return resolved
