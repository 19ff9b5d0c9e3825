"""An engine's SQLite state moved into an empty PostgreSQL database (``fluksio db copy``):
every table's rows, in one transaction, their counts checked on both sides before it
commits; and the engine's keys, from the data directory's files into the database,
sealed. A target that is not empty is refused, so nothing is ever merged into a team's
state; both are at this engine's schema version (each migrated as an engine opens it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fluksio.engine.database import Database, placeholders
from fluksio.engine.db import SqliteDatabase
from fluksio.engine.key_places import KeyPlace
from fluksio.errors import ConfigError

__all__ = ["Copied", "copy_state"]

BATCH = 5000
"""Rows read from SQLite and sent to PostgreSQL at once."""
_NOT_COPIED = frozenset({"engine_lease", "engine_keys"})
"""The lease is the engines' of the target; the keys are copied from their files."""
KEYS = ("signing", "secrets")


@dataclass(frozen=True)
class Copied:
    table: str
    rows: int


def copy_state(
    source: SqliteDatabase, target: Database, keys: KeyPlace, sealed: KeyPlace
) -> list[Copied]:
    """Copy every table of ``source`` into the empty ``target``, and the keys ``keys``
    holds into ``sealed``; what each table holds now. Nothing is written when any of it
    fails."""
    tables = [t for t in _tables(source) if t not in _NOT_COPIED]
    held = [t for t in tables if target.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()]  # noqa: S608
    if held:
        raise ConfigError(
            f"the target database {target.where} is not empty (rows in {', '.join(held)});"
            " copy into a new, empty database"
        )
    copied = []
    with target.transaction() as statements:
        for table in tables:
            columns = [row["name"] for row in source.execute(f"PRAGMA table_info({table})")]
            insert = (
                f"INSERT INTO {table} ({', '.join(columns)})"  # noqa: S608 (names of our schema)
                f" VALUES ({placeholders(len(columns))})"
            )
            for batch in _batches(source, table, columns):
                statements.executemany(insert, batch)
            count = _count(source, table)
            arrived = int(statements.execute(f"SELECT COUNT(*) AS n FROM {table}").fetchone()["n"])  # noqa: S608
            if arrived != count:
                raise ConfigError(
                    f"{table}: {count} rows in the data directory but {arrived} arrived;"
                    " nothing was copied"
                )
            copied.append(Copied(table, count))
        for name in KEYS:
            if keys.identity(name) is not None:
                sealed.write(name, keys.read(name))
    return copied


def _tables(source: SqliteDatabase) -> list[str]:
    """The tables in the order they were made: a table before those that refer to it."""
    rows = source.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY rowid"
    )
    return [row["name"] for row in rows]


def _batches(
    source: SqliteDatabase, table: str, columns: list[str]
) -> Iterator[list[tuple[object, ...]]]:
    cursor = source.execute(f"SELECT {', '.join(columns)} FROM {table}")  # noqa: S608
    while batch := cursor.fetchmany(BATCH):
        yield [tuple(row) for row in batch]


def _count(source: SqliteDatabase, table: str) -> int:
    return int(source.execute(f"SELECT COUNT(*) AS n FROM {table}").fetchone()["n"])  # noqa: S608
