"""What the stores ask of a database, whichever it is: SQLite in the data directory
(:mod:`fluksio.engine.db`) or PostgreSQL (:mod:`fluksio.engine.postgres.database`).

The stores say their SQL once, in the words both understand: ``?`` placeholders, ``ON
CONFLICT ... DO UPDATE``, columns read by name. Each database takes it from there
(PostgreSQL's driver wants ``%s``); what only one of them has (SQLite's ``rowid`` and
``json_each``, ``INSERT OR REPLACE``) is not used.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = ["Cursor", "Database", "Statements", "placeholders"]


class Cursor(Protocol):
    """The rows of one statement; each row's columns are read by name (``row["id"]``)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Statements(Protocol):
    """Where statements run: the database itself (each its own transaction), or one
    transaction of it."""

    def execute(self, sql: str, params: Sequence[object] = (), /) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> object: ...


class Database(Statements, Protocol):
    @property
    def where(self) -> str:
        """The database as a person knows it (a path, or a host and a name: never a
        password), for the sentences that name it."""
        ...

    def transaction(self) -> AbstractContextManager[Statements]:
        """The statements run in the block, committed together at its end, or none of
        them if it raises."""
        ...

    def close(self) -> None: ...


def placeholders(count: int) -> str:
    """``?, ?, ?`` for an ``IN (...)`` of ``count`` values (at least one)."""
    return ", ".join("?" * max(1, count))
