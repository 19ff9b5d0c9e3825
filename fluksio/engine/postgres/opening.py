"""Opening the engine's PostgreSQL database from ``--database``: the URL checked, the
password read from where it may be kept, the first connection made with a sentence for
each way it fails, the schema migrated.

The password is never in the URL (a URL is seen in ``ps``, in logs and in shell history):
libpq reads it from ``PGPASSFILE`` (or ``~/.pgpass``), or ``--database-password-file``
names a file holding it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow

from fluksio.engine.postgres.database import PostgresDatabase, first_line, prepared
from fluksio.engine.postgres.fence import Fence
from fluksio.engine.postgres.schema import migrate
from fluksio.errors import ConfigError

__all__ = ["CONNECT_TIMEOUT_S", "connector", "open_postgres", "where_of"]

CONNECT_TIMEOUT_S = 10
"""How long one attempt to reach the database may take before it is said to fail."""
_SCHEMES = ("postgresql://", "postgres://")


def where_of(url: str) -> str:
    """The database a URL names, as a sentence names it: ``host:port/name``, never its
    user's password. A URL that is not one, or that holds a password, is refused."""
    if not url.startswith(_SCHEMES):
        raise ConfigError(
            f"--database: {url.split(':', 1)[0]!r} is not a PostgreSQL URL; give"
            " postgresql://USER@HOST:PORT/NAME (without it the engine keeps its state in"
            " SQLite in the data directory)"
        )
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise ConfigError(
            "--database: the URL cannot be read; give postgresql://USER@HOST:PORT/NAME"
        ) from None
    if parts.get("password"):
        raise ConfigError(
            "--database: the URL holds a password, which would be seen in `ps` and in"
            " logs; put it in PGPASSFILE or in the file --database-password-file names"
        )
    host = str(parts.get("host") or "localhost")
    return f"{host}:{parts.get('port') or 5432}/{parts.get('dbname') or parts.get('user') or ''}"


def open_postgres(
    url: str, password_file: Path | None = None, fence: Fence | None = None
) -> PostgresDatabase:
    """The database ``url`` names, reached and migrated; a :class:`ConfigError` naming it
    and what to check when it cannot be."""
    where = where_of(url)
    connect = connector(url, password_file)

    try:
        first = connect()
    except psycopg.OperationalError as exc:
        raise ConfigError(
            f"cannot reach the state database {where}: {first_line(exc)}; check that"
            " PostgreSQL runs there and accepts this machine, and the role's password"
            " (PGPASSFILE or --database-password-file)"
        ) from None
    try:
        migrate(first, where)
    except psycopg.Error as exc:
        first.close()
        raise ConfigError(f"cannot prepare the state database {where}: {first_line(exc)}") from None
    except ConfigError:
        first.close()
        raise
    first.close()
    database = PostgresDatabase(connect, where, fence)
    database.execute("SELECT 1")  # the stores' own connection, made now
    return database


def connector(url: str, password_file: Path | None) -> Callable[[], psycopg.Connection[DictRow]]:
    """What opens a new connection to ``url``, ready for the stores."""
    password = _password(password_file)

    def connect() -> psycopg.Connection[DictRow]:
        connection = psycopg.connect(
            url,
            password=password,
            connect_timeout=CONNECT_TIMEOUT_S,
            application_name="fluksio-engine",
        )
        return prepared(connection)  # type: ignore[arg-type]

    return connect


def _password(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--database-password-file: cannot read {path}: {exc.strerror}") from None
    if not text:
        raise ConfigError(f"--database-password-file: {path} is empty")
    return text
