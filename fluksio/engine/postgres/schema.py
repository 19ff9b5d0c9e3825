"""The schema on PostgreSQL: SQLite's migrations (:data:`fluksio.engine.db.MIGRATIONS`),
each statement said in PostgreSQL's words, so that the schema is declared once.

SQLite's types are its own: ``REAL`` is a double there and a single on PostgreSQL, and its
``INTEGER`` holds 64 bits where PostgreSQL's holds 32; ``BLOB`` is ``BYTEA``, and
``WITHOUT ROWID`` (how SQLite lays out a table with a primary key) means nothing there.
The rest of the SQL the migrations use is the same on both. The version is a row of
``fluksio_schema``; each migration runs in its own transaction, and a database newer than
this engine is refused rather than half-understood, as on SQLite.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from psycopg.rows import tuple_row

from fluksio.engine.db import MIGRATIONS, statements
from fluksio.errors import ConfigError

if TYPE_CHECKING:
    import psycopg

__all__ = ["migrate", "postgres_statement", "schema_version"]

_MIGRATING = 0x666C756B  # the advisory lock's key: "fluk"

_TYPES = (
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\)\s*WITHOUT ROWID\s*;?\s*$"), ")"),
)


def postgres_statement(statement: str) -> str:
    """One statement of a migration as PostgreSQL says it."""
    for pattern, said in _TYPES:
        statement = pattern.sub(said, statement)
    return statement


def schema_version(connection: psycopg.Connection[Any]) -> int:
    """The version the database's schema is at; 0 for an empty database."""
    with connection.transaction():
        connection.execute("CREATE TABLE IF NOT EXISTS fluksio_schema (version BIGINT NOT NULL)")
        reading = connection.cursor(row_factory=tuple_row)
        row = reading.execute("SELECT version FROM fluksio_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(
    connection: psycopg.Connection[Any],
    where: str,
    migrations: tuple[str, ...] = MIGRATIONS,
) -> int:
    """Take the database ``where`` names (its host and name, never its password) to the
    newest schema; returns the version it is at. Engines starting together on one
    database migrate it one after the other (a lock held for the migration alone)."""
    connection.execute("SELECT pg_advisory_lock(%s)", (_MIGRATING,))
    try:
        return _migrated(connection, where, migrations)
    finally:
        connection.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATING,))


def _migrated(connection: psycopg.Connection[Any], where: str, migrations: tuple[str, ...]) -> int:
    current = schema_version(connection)
    if current > len(migrations):
        raise ConfigError(
            f"the state database {where} has schema version {current}, newer than this"
            f" fluksio understands ({len(migrations)}); upgrade fluksio to use it"
        )
    for version in range(current, len(migrations)):
        with connection.transaction():
            for statement in statements(migrations[version]):
                # As bytes: a statement made at run time is no literal, and has no parameter.
                connection.execute(postgres_statement(statement).encode())
            connection.execute("DELETE FROM fluksio_schema")
            connection.execute("INSERT INTO fluksio_schema (version) VALUES (%s)", (version + 1,))
    return len(migrations)
