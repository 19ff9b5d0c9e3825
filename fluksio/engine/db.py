"""The embedded state store: one SQLite file in WAL mode, migrated forward on open.

The schema version is SQLite's ``user_version``. ``MIGRATIONS[i]`` takes a database at
version ``i`` to ``i + 1``; each runs in its own transaction, so a crash mid-migration
leaves the previous version intact. A database newer than this code is refused rather
than half-understood.

A write the disk has no room for raises :class:`~fluksio.errors.StorageFull` (507 to
a client) and leaves nothing of itself: a transaction is rolled back whole. Reads go on
working, and a write after space has returned succeeds; nothing needs restarting.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fluksio.errors import ConfigError, StorageFull

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SqliteDatabase", "open_database", "statements"]

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: users and worker tokens.
    """
    CREATE TABLE users (
        username       TEXT PRIMARY KEY,
        password_hash  TEXT NOT NULL,
        is_superuser   INTEGER NOT NULL DEFAULT 0,
        created_at     REAL NOT NULL
    );
    CREATE TABLE worker_tokens (
        jti            TEXT PRIMARY KEY,
        name           TEXT NOT NULL,
        labels         TEXT NOT NULL,
        created_at     REAL NOT NULL,
        expires_at     REAL NOT NULL,
        created_by     TEXT,
        revoked_at     REAL,
        revoked_reason TEXT
    );
    CREATE INDEX worker_tokens_by_name ON worker_tokens(name);
    """,
    # 1 -> 2: flows, runs, the state of each node of a run, secrets.
    """
    CREATE TABLE flows (
        name        TEXT PRIMARY KEY,
        spec        TEXT NOT NULL,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL
    );
    CREATE TABLE runs (
        id          TEXT PRIMARY KEY,
        flow        TEXT NOT NULL,
        spec        TEXT NOT NULL,
        params      TEXT NOT NULL,
        state       TEXT NOT NULL,
        created_at  REAL NOT NULL,
        started_at  REAL,
        ended_at    REAL
    );
    CREATE INDEX runs_by_flow ON runs(flow, created_at);
    CREATE INDEX runs_by_state ON runs(state, created_at);
    CREATE TABLE node_runs (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node_id     TEXT NOT NULL,
        state       TEXT NOT NULL,
        call_id     TEXT,
        place       TEXT,
        queued_at   REAL,
        started_at  REAL,
        ended_at    REAL,
        result      TEXT,
        error       TEXT,
        logs        TEXT,
        events      TEXT,
        PRIMARY KEY (run_id, node_id)
    );
    CREATE TABLE secrets (
        name        TEXT PRIMARY KEY,
        labels      TEXT NOT NULL,
        nonce       BLOB NOT NULL,
        ciphertext  BLOB NOT NULL,
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL
    );
    """,
    # v3: provisioning requests a job was submitted for, so a restarted engine (or one
    # that crashed) still polls, times out and cancels them instead of leaking them.
    """
    CREATE TABLE provision_requests (
        id           TEXT PRIMARY KEY,
        provisioner  TEXT NOT NULL,
        profile      TEXT NOT NULL,
        job_id       TEXT NOT NULL,
        token_jti    TEXT,
        stage        TEXT NOT NULL,
        created_at   REAL NOT NULL,
        attached_at  REAL
    );
    """,
    # v4: a request is written down before it is submitted, so its job id may be unknown
    # (an engine killed mid-submission looks for the job by its mark). SQLite cannot drop
    # a NOT NULL, so the table is copied.
    """
    CREATE TABLE provision_requests_v4 (
        id           TEXT PRIMARY KEY,
        provisioner  TEXT NOT NULL,
        profile      TEXT NOT NULL,
        job_id       TEXT,
        token_jti    TEXT,
        stage        TEXT NOT NULL,
        created_at   REAL NOT NULL,
        attached_at  REAL
    );
    INSERT INTO provision_requests_v4 SELECT * FROM provision_requests;
    DROP TABLE provision_requests;
    ALTER TABLE provision_requests_v4 RENAME TO provision_requests;
    """,
    # v5: where each node call ran (worker, host, batch job, GPUs, the request that brought
    # the worker), as JSON; older rows have none.
    """
    ALTER TABLE node_runs ADD COLUMN provenance TEXT;
    """,
    # v6: scrape tokens for GET /metrics, kept as digests only (the text is shown once).
    """
    CREATE TABLE scrape_tokens (
        id          TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        digest      TEXT NOT NULL UNIQUE,
        created_at  REAL NOT NULL,
        created_by  TEXT NOT NULL,
        revoked_at  REAL
    );
    """,
    # v7: which attempt a node is on, so that its retries are counted across a restart.
    """
    ALTER TABLE node_runs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
    """,
    # v8: ended runs found by their end, for the retention that deletes the oldest.
    """
    CREATE INDEX runs_by_end ON runs(ended_at) WHERE ended_at IS NOT NULL;
    """,
    # v9: personal API tokens, for a user's scripts, kept as digests only.
    """
    CREATE TABLE personal_tokens (
        id          TEXT PRIMARY KEY,
        username    TEXT NOT NULL,
        name        TEXT NOT NULL,
        digest      TEXT NOT NULL UNIQUE,
        created_at  REAL NOT NULL,
        expires_at  REAL NOT NULL,
        revoked_at  REAL
    );
    CREATE INDEX personal_tokens_by_user ON personal_tokens(username);
    """,
    # v10: flows made for one script's calls (the Python executor's), deleted by the
    # retention once no kept run is of them.
    """
    ALTER TABLE flows ADD COLUMN transient INTEGER NOT NULL DEFAULT 0;
    """,
    # v11: arrays. An array node's counts by item state; a row per item once it has
    # started (an item with none has not: its parameters are still only in its source).
    """
    ALTER TABLE node_runs ADD COLUMN array_summary TEXT;
    CREATE TABLE array_items (
        run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node_id     TEXT NOT NULL,
        idx         INTEGER NOT NULL,
        state       TEXT NOT NULL,
        call_id     TEXT,
        place       TEXT,
        queued_at   REAL,
        started_at  REAL,
        ended_at    REAL,
        result      TEXT,
        error       TEXT,
        logs        TEXT,
        events      TEXT,
        provenance  TEXT,
        attempt     INTEGER NOT NULL DEFAULT 1,
        PRIMARY KEY (run_id, node_id, idx)
    ) WITHOUT ROWID;
    """,
    # v12: a request the engine cancelled as it stopped, so that the next engine does not
    # count its job's end as a failed start.
    """
    ALTER TABLE provision_requests ADD COLUMN withdrawn INTEGER NOT NULL DEFAULT 0;
    """,
    # v13: profiles a person paused (fluksio provisioners pause), with the sentence said
    # of them: a pause by hand outlasts the engine.
    """
    CREATE TABLE provision_pauses (
        profile  TEXT PRIMARY KEY,
        said     TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # v14: how a call's attempts were spent, so that a restart counts them as before: those
    # begun again after its job's end (no retry spent), and where its worker died under it.
    """
    ALTER TABLE node_runs ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE node_runs ADD COLUMN crashes TEXT;
    ALTER TABLE array_items ADD COLUMN interruptions INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE array_items ADD COLUMN crashes TEXT;
    """,
    # v15: the state a call last saved (fluksio.checkpoint), given back to its next attempt
    # after a restart too; an artifact reference, which keeps the artifact from retention.
    """
    ALTER TABLE node_runs ADD COLUMN checkpoint TEXT;
    ALTER TABLE array_items ADD COLUMN checkpoint TEXT;
    """,
    # v16: who holds a call running on a worker (its token, name and process), so that a
    # restarted engine hands it back to that worker alone, not to another of its name.
    """
    ALTER TABLE node_runs ADD COLUMN holder TEXT;
    ALTER TABLE array_items ADD COLUMN holder TEXT;
    """,
    # v17: what each call uploaded with its own credential: a checkpoint may name only
    # state its call saved, also when its answer reaches the engine after a restart.
    """
    CREATE TABLE call_saves (
        call_id  TEXT NOT NULL,
        digest   TEXT NOT NULL,
        size     INTEGER NOT NULL,
        saved_at REAL NOT NULL,
        PRIMARY KEY (call_id, digest)
    ) WITHOUT ROWID;
    CREATE INDEX call_saves_at ON call_saves (saved_at);
    """,
    # v18: secret values replaced or deleted lately, still encrypted: a call given the old
    # value and adopted after a restart has it blanked in what it prints all the same.
    """
    CREATE TABLE secret_history (
        name        TEXT NOT NULL,
        nonce       BLOB NOT NULL,
        ciphertext  BLOB NOT NULL,
        replaced_at REAL NOT NULL
    );
    CREATE INDEX secret_history_name ON secret_history (name, replaced_at);
    """,
    # v19: what each profile's site allowed at its last reading: a restarted engine keeps
    # to it while the site's accounting cannot be read (slurmdbd down or hanging).
    """
    CREATE TABLE provision_sites (
        profile  TEXT PRIMARY KEY,
        reading  TEXT NOT NULL
    ) WITHOUT ROWID;
    """,
    # v20: an array's items cancelled before they were read, as ranges of positions (both
    # ends included): a million cancelled at once are a few rows, not a million.
    """
    CREATE TABLE item_cancels (
        run_id  TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        node_id TEXT NOT NULL,
        low     INTEGER NOT NULL,
        high    INTEGER NOT NULL,
        PRIMARY KEY (run_id, node_id, low)
    ) WITHOUT ROWID;
    """,
    # v21: the engine's own keys (token signing, secrets), sealed, for an engine on
    # PostgreSQL: every engine of the database signs and reads with the same ones.
    """
    CREATE TABLE engine_keys (
        name     TEXT PRIMARY KEY,
        nonce    BLOB NOT NULL,
        sealed   BLOB NOT NULL,
        made_at  REAL NOT NULL
    );
    """,
    # v22: which engine of several on one PostgreSQL database is active: one row, its
    # holder, its epoch (each takeover the next) and when it runs out.
    """
    CREATE TABLE engine_lease (
        id          INTEGER PRIMARY KEY,
        holder      TEXT NOT NULL,
        address     TEXT NOT NULL,
        epoch       INTEGER NOT NULL,
        expires_at  REAL NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


class SqliteDatabase:
    """A SQLite connection with explicit transactions (autocommit otherwise): a
    :class:`~fluksio.engine.database.Database`."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self.connection = connection
        self.path = path

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def schema_version(self) -> int:
        return int(self.connection.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception; a full disk is
        :class:`StorageFull`."""
        try:
            self.connection.execute("BEGIN IMMEDIATE")
            try:
                yield self.connection
                self.connection.execute("COMMIT")
            except BaseException:
                if self.connection.in_transaction:
                    self.connection.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            raise _storage_error(exc) from exc

    def execute(self, sql: str, params: Sequence[object] = (), /) -> sqlite3.Cursor:
        try:
            return self.connection.execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise _storage_error(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> sqlite3.Cursor:
        try:
            return self.connection.executemany(sql, rows)
        except sqlite3.OperationalError as exc:
            raise _storage_error(exc) from exc

    def close(self) -> None:
        self.connection.close()


_SQLITE_FULL = 13
_SQLITE_IOERR = 10


def _storage_error(exc: sqlite3.OperationalError) -> Exception:
    """A write the disk had no room for, as :class:`StorageFull`; anything else as it is."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code of an extended one
    if code not in (_SQLITE_FULL, _SQLITE_IOERR):
        return exc
    # SQLite reports a full disk as an I/O error where the write itself failed: say both.
    disk = "its disk is full" if code == _SQLITE_FULL else "its disk is full or failing"
    return StorageFull(
        f"the engine could not write its state ({exc}): {disk}; nothing of this change was"
        " kept. Free space under the data directory and try again"
    )


def open_database(path: Path, migrations: tuple[str, ...] = MIGRATIONS) -> SqliteDatabase:
    """Open (creating if needed) and migrate the database at ``path``."""
    try:
        # Created 0600 before SQLite opens it: SQLite gives its -wal and -shm files the
        # database file's mode.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        connection.row_factory = sqlite3.Row
        connection.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across process crashes in WAL mode; only power loss can
        # drop the last transactions, which is the trade every WAL store makes.
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute("PRAGMA busy_timeout=5000")
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot open the state database {path}: {exc}") from exc
    database = SqliteDatabase(connection, path)
    _migrate(database, migrations)
    return database


def _migrate(database: SqliteDatabase, migrations: tuple[str, ...]) -> None:
    current = database.schema_version
    if current > len(migrations):
        raise ConfigError(
            f"the state database {database.path} has schema version {current}, newer than "
            f"this fluksio understands ({len(migrations)}); upgrade fluksio to use it"
        )
    for version in range(current, len(migrations)):
        try:
            with database.transaction() as connection:
                for statement in statements(migrations[version]):
                    connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {version + 1}")
        except sqlite3.Error as exc:
            raise ConfigError(
                f"migrating {database.path} to schema version {version + 1} failed ({exc});"
                f" it is unchanged at version {version}"
            ) from exc


def statements(script: str) -> list[str]:
    """The statements of ``script``, each whole: a ``;`` inside a string literal, a
    comment or a trigger's body does not end one (SQLite's own tokenizer says when one
    is complete). executescript() would COMMIT our transaction first, so they run one by
    one."""
    found, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            found.append(pending.strip())
            pending = ""
    tail = pending.removesuffix(";").strip()
    if tail:
        found.append(tail)  # the last statement may omit its ';'
    return found
