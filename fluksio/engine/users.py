"""Engine users: the superuser created on first start, and any others added by hand."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.engine.passwords import dummy_hash, hash_password, verify_password
from fluksio.errors import ConfigError

__all__ = ["NewSuperuser", "User", "UserStore", "bootstrap_superuser", "check_password"]

DEFAULT_SUPERUSER = "admin"


@dataclass(frozen=True)
class User:
    username: str
    is_superuser: bool


@dataclass(frozen=True)
class NewSuperuser:
    """What first start created; ``generated_password`` is set only when we chose it."""

    username: str
    generated_password: str | None


class UserStore:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) AS n FROM users").fetchone()["n"])

    def get(self, username: str) -> User | None:
        row = self._db.execute(
            "SELECT username, is_superuser FROM users WHERE username = ?", (username,)
        ).fetchone()
        return None if row is None else User(row["username"], bool(row["is_superuser"]))

    def add(
        self, username: str, password: str, *, is_superuser: bool, cost: int | None = None
    ) -> User:
        """``cost``: the password's hashing cost (None: the default; see
        :func:`~fluksio.engine.passwords.hash_password`)."""
        hashed = hash_password(password) if cost is None else hash_password(password, cost=cost)
        added = self._db.execute(
            "INSERT INTO users (username, password_hash, is_superuser, created_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (username) DO NOTHING",
            (username, hashed, int(is_superuser), self._clock.now()),
        )
        if added.rowcount == 0:
            raise ConfigError(f"a user named {username!r} already exists")
        return User(username, is_superuser)

    def all(self) -> list[User]:
        rows = self._db.execute("SELECT username, is_superuser FROM users ORDER BY username")
        return [User(row["username"], bool(row["is_superuser"])) for row in rows]

    def set_superuser(self, username: str, is_superuser: bool) -> User:
        """Make ``username`` a superuser or a user; it takes effect at its next request.
        The last superuser stays one, as it stays at :meth:`remove`."""
        user = self._require(username)
        if not is_superuser:
            self._keep_a_superuser(user)
        self._db.execute(
            "UPDATE users SET is_superuser = ? WHERE username = ?", (int(is_superuser), username)
        )
        return User(username, is_superuser)

    def remove(self, username: str) -> None:
        """Remove ``username``: its access tokens stop working at once (each request looks
        its user up). The last superuser stays, so the engine keeps someone to manage it."""
        self._keep_a_superuser(self._require(username))
        self._db.execute("DELETE FROM users WHERE username = ?", (username,))

    def _keep_a_superuser(self, leaving: User) -> None:
        """Refuse to leave the engine with no superuser to manage it."""
        if leaving.is_superuser and sum(u.is_superuser for u in self.all()) == 1:
            raise ConfigError(f"{leaving.username!r} is the only superuser; make another one first")

    def _require(self, username: str) -> User:
        user = self.get(username)
        if user is None:
            raise ConfigError(f"no user named {username!r}")
        return user

    def credentials(self, username: str) -> tuple[User, str] | None:
        """The user and the stored password hash, for verifying off the event loop."""
        row = self._db.execute(
            "SELECT username, password_hash, is_superuser FROM users WHERE username = ?",
            (username,),
        ).fetchone()
        if row is None:
            return None
        return User(row["username"], bool(row["is_superuser"])), row["password_hash"]


def check_password(found: tuple[User, str] | None, password: str) -> User | None:
    """The user when ``password`` matches; the same work is done for an unknown user."""
    stored = found[1] if found is not None else dummy_hash()
    matches = verify_password(password, stored)
    return found[0] if found is not None and matches else None


def bootstrap_superuser(users: UserStore) -> NewSuperuser | None:
    """On an empty user table, create the superuser from the environment.

    ``FLUKSIO_SUPERUSER`` (default ``admin``) and ``FLUKSIO_SUPERUSER_PASSWORD``; without a
    password one is generated and returned so the caller can show it once.
    """
    if users.count() > 0:
        return None
    username = os.environ.get("FLUKSIO_SUPERUSER") or DEFAULT_SUPERUSER
    password = os.environ.get("FLUKSIO_SUPERUSER_PASSWORD")
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(18)
    users.add(username, password, is_superuser=True)
    return NewSuperuser(username=username, generated_password=generated)
