"""The data directory: private, WAL-mode SQLite with a schema version, one engine at a time."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from fluksio.engine.db import MIGRATIONS, SCHEMA_VERSION, open_database
from fluksio.errors import ConfigError
from tests.support.engine import EngineProcess, start_engine


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_fresh_directory_is_private_and_versioned(engine: EngineProcess) -> None:
    root = engine.data_dir
    assert _mode(root) == 0o700
    assert _mode(root / "signing_key.pem") == 0o600
    assert _mode(root / "fluksio.sqlite3") == 0o600
    with sqlite3.connect(root / "fluksio.sqlite3") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_second_engine_on_the_same_directory_is_refused(
    engine: EngineProcess, tmp_path: Path
) -> None:
    with pytest.raises(AssertionError, match="already using the data directory"):
        start_engine(engine.data_dir, tmp_path / "second")


def test_migrations_run_forward_from_an_older_version(tmp_path: Path) -> None:
    extended = (*MIGRATIONS, "CREATE TABLE later_feature (id INTEGER PRIMARY KEY)")
    older = open_database(tmp_path / "state.sqlite3")
    older.execute("INSERT INTO users (username, password_hash, created_at) VALUES ('kept', 'x', 0)")
    older.close()
    newer = open_database(tmp_path / "state.sqlite3", extended)
    assert newer.schema_version == len(extended)
    assert newer.execute("SELECT username FROM users").fetchone()[0] == "kept"
    newer.execute("INSERT INTO later_feature DEFAULT VALUES")
    newer.close()


def test_a_database_from_a_newer_fluksio_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ConfigError, match="newer than this fluksio understands"):
        open_database(path)


def test_a_failed_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    open_database(path).close()
    broken = (*MIGRATIONS, "CREATE TABLE ok_table (id INTEGER); CREATE TABLE users (x)")
    with pytest.raises(ConfigError, match=f"unchanged at version {SCHEMA_VERSION}"):
        open_database(path, broken)
    again = open_database(path)
    assert again.schema_version == SCHEMA_VERSION
    names = {row[0] for row in again.execute("SELECT name FROM sqlite_master")}
    assert "ok_table" not in names
    again.close()


def test_a_migration_may_hold_semicolons_in_literals_and_trigger_bodies(tmp_path: Path) -> None:
    later = """
        CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL DEFAULT 'a; b');
        -- a comment; with a semicolon
        CREATE TRIGGER notes_stamped AFTER INSERT ON notes BEGIN
            UPDATE notes SET body = body || '; stamped' WHERE id = NEW.id;
        END;
        INSERT INTO notes DEFAULT VALUES
    """
    database = open_database(tmp_path / "state.sqlite3", (*MIGRATIONS, later))
    assert database.schema_version == SCHEMA_VERSION + 1
    rows = database.execute("SELECT body FROM notes").fetchall()
    assert [row[0] for row in rows] == ["a; b; stamped"]
    database.close()
