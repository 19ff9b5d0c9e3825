"""Where the engine's own keys are kept: its token signing key and the key its secrets are
encrypted with.

On SQLite they are files in the data directory (0600), beside the database, as they
always were. On PostgreSQL they are rows of the database, so that every engine of it signs
and reads with the same keys whatever its data directory holds; sealed (AES-256-GCM)
under a key every engine is given as a file (``--database-key-file``): a copy of the
database alone signs no token and reveals no secret.

A key is made once: two engines starting at once on an empty place agree on one (the
files by a link, the rows by their primary key). A replaced key (``fluksio keys rotate``)
is noticed by its identity: a file's inode and time at once, a row's within
:data:`FOLLOW_S` (reading it costs a round trip, and a token is checked per request).
"""

from __future__ import annotations

import hashlib
import secrets as random
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.engine.datadir import DataDir
from fluksio.errors import ConfigError

__all__ = ["FOLLOW_S", "KeyFiles", "KeyPlace", "SealedKeys", "sealing_key"]

FOLLOW_S = 2.0
"""How soon an engine on PostgreSQL follows a key replaced by another process."""
KEY_FILE_LEAST_BYTES = 32


class KeyPlace(Protocol):
    def identity(self, name: str) -> object | None:
        """What changes when the key ``name`` is replaced; None while there is none."""
        ...

    def create_once(self, name: str, value: bytes) -> bytes:
        """Keep ``value`` as ``name`` unless there is one; the key kept, either way."""
        ...

    def read(self, name: str) -> bytes: ...

    def write(self, name: str, value: bytes) -> None:
        """Replace ``name`` with ``value``."""
        ...


class KeyFiles:
    """The keys as files of the data directory."""

    def __init__(self, layout: DataDir) -> None:
        self._layout = layout

    def path(self, name: str) -> Path:
        return {"signing": self._layout.signing_key, "secrets": self._layout.secrets_key}[name]

    def identity(self, name: str) -> object | None:
        try:
            stat = self.path(name).stat()
        except FileNotFoundError:
            return None
        return (stat.st_ino, stat.st_mtime_ns)

    def create_once(self, name: str, value: bytes) -> bytes:
        return self._layout.create_secret_once(self.path(name), value)

    def read(self, name: str) -> bytes:
        path = self.path(name)
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the key {path}: {exc.strerror}") from exc

    def write(self, name: str, value: bytes) -> None:
        self._layout.write_secret(self.path(name), value)


def sealing_key(path: Path) -> bytes:
    """The key the keys in the database are sealed with, from the file every engine of it
    is given (any text of 32 bytes or more: ``openssl rand -base64 32``)."""
    try:
        text = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"--database-key-file: cannot read {path}: {exc.strerror}") from None
    if len(text) < KEY_FILE_LEAST_BYTES:
        raise ConfigError(
            f"--database-key-file: {path} holds {len(text)} bytes, fewer than"
            f" {KEY_FILE_LEAST_BYTES}; make one with `openssl rand -base64 32 > {path}`"
        )
    return hashlib.sha256(b"fluksio engine keys\0" + text).digest()


class SealedKeys:
    """The keys as sealed rows of the database (``engine_keys``)."""

    def __init__(self, database: Database, key: bytes, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock
        self._cipher = AESGCM(key)
        self._followed: dict[str, tuple[float, object | None]] = {}

    def identity(self, name: str) -> object | None:
        now = self._clock.monotonic()
        known = self._followed.get(name)
        if known is not None and known[1] is not None and now - known[0] < FOLLOW_S:
            return known[1]
        row = self._db.execute("SELECT nonce FROM engine_keys WHERE name = ?", (name,)).fetchone()
        found = None if row is None else bytes(row["nonce"])  # a new one at each write
        self._followed[name] = (now, found)
        return found

    def create_once(self, name: str, value: bytes) -> bytes:
        nonce = random.token_bytes(12)
        self._db.execute(
            "INSERT INTO engine_keys (name, nonce, sealed, made_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO NOTHING",
            (name, nonce, self._cipher.encrypt(nonce, value, name.encode()), self._clock.now()),
        )
        return self.read(name)

    def read(self, name: str) -> bytes:
        row = self._db.execute(
            "SELECT nonce, sealed FROM engine_keys WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise ConfigError(f"the engine's {name} key is missing from {self._db.where}")
        try:
            return self._cipher.decrypt(bytes(row["nonce"]), bytes(row["sealed"]), name.encode())
        except InvalidTag:
            raise ConfigError(
                f"the engine's keys in {self._db.where} were sealed under another"
                " --database-key-file; give every engine of this database the same file"
            ) from None

    def write(self, name: str, value: bytes) -> None:
        nonce = random.token_bytes(12)
        self._db.execute(
            "INSERT INTO engine_keys (name, nonce, sealed, made_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (name) DO UPDATE SET nonce = excluded.nonce,"
            " sealed = excluded.sealed, made_at = excluded.made_at",
            (name, nonce, self._cipher.encrypt(nonce, value, name.encode()), self._clock.now()),
        )
        self._followed.pop(name, None)
