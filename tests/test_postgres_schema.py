"""One schema on both databases: SQLite's migrations, said in PostgreSQL's words, make
the same tables, columns, nullability and primary keys on a real PostgreSQL (Debian's,
``make postgres-up``); a database newer than the engine is refused there too."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from fluksio.engine.db import MIGRATIONS, open_database
from fluksio.engine.postgres.schema import migrate, schema_version
from fluksio.errors import ConfigError
from tests.support.postgres import LocalPostgres

pytestmark = pytest.mark.contract

Shape = dict[str, tuple[list[tuple[str, str, bool]], list[str]]]
"""Each table: its columns in order (name, type, nullable), and its primary key's columns."""
AS_POSTGRES = {"TEXT": "text", "REAL": "double precision", "INTEGER": "bigint", "BLOB": "bytea"}
"""What each SQLite type must be there: a double a double, 64 bits 64 bits."""


def _sqlite_shape(path: Path) -> Shape:
    connection = sqlite3.connect(path)
    tables = [
        r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    ]
    shape: Shape = {}
    for table in tables:
        info = connection.execute(f"PRAGMA table_info({table})").fetchall()
        columns = [
            (name, AS_POSTGRES[kind], not notnull and not pk)
            for _cid, name, kind, notnull, _d, pk in info
        ]
        key = [name for _cid, name, _t, _nn, _d, pk in sorted(info, key=lambda c: c[5]) if pk]
        shape[table] = (columns, key)
    connection.close()
    return shape


def _postgres_shape(cluster: LocalPostgres, url: str) -> Shape:
    shape: Shape = {}
    with cluster.connect(url) as connection:
        columns = connection.execute(
            "SELECT table_name, column_name, data_type, is_nullable = 'YES'"
            " FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name <> 'fluksio_schema'"
            " ORDER BY table_name, ordinal_position"
        ).fetchall()
        keys = connection.execute(
            "SELECT k.table_name, k.column_name FROM information_schema.table_constraints c"
            " JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)"
            " WHERE c.constraint_type = 'PRIMARY KEY' AND c.table_schema = 'public'"
            " ORDER BY k.table_name, k.ordinal_position"
        ).fetchall()
    for table, column, kind, nullable in columns:
        shape.setdefault(str(table), ([], []))[0].append((str(column), str(kind), bool(nullable)))
    for table, column in keys:
        shape[str(table)][1].append(str(column))
    return shape


def test_the_migrations_make_the_same_schema_on_postgresql_as_on_sqlite(
    pg_cluster: LocalPostgres, pg_database: str, tmp_path: Path
) -> None:
    open_database(tmp_path / "state.sqlite3").close()
    with pg_cluster.connect(pg_database) as connection:
        assert migrate(connection, "the test's database") == len(MIGRATIONS)
        # Again: nothing left to do, nothing done twice.
        assert migrate(connection, "the test's database") == len(MIGRATIONS)
        assert schema_version(connection) == len(MIGRATIONS)
    expected = _sqlite_shape(tmp_path / "state.sqlite3")
    assert {"runs", "node_runs", "array_items", "secrets", "worker_tokens"} <= expected.keys()
    assert _postgres_shape(pg_cluster, pg_database) == expected


def test_a_schema_newer_than_the_engine_is_refused_with_a_sentence(
    pg_cluster: LocalPostgres, pg_database: str
) -> None:
    with pg_cluster.connect(pg_database) as connection:
        migrate(connection, "db")
        connection.execute("UPDATE fluksio_schema SET version = version + 1")
        connection.commit()
        with pytest.raises(ConfigError, match=r"newer than this fluksio understands"):
            migrate(connection, "db on 127.0.0.1")
