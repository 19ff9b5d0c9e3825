"""The engine's state on PostgreSQL: a :class:`~fluksio.engine.database.Database` over one
psycopg connection.

The stores' SQL is said once for both databases (``?`` placeholders, columns read by
name); here it becomes psycopg's (``%s``, a ``%`` of the SQL doubled), once per
statement text. A Python ``bool`` is written as the ``BIGINT`` 0 or 1 SQLite's schema
declares. A connection that broke (the server restarted, the network went) is opened
again at the next statement; meanwhile every statement raises :class:`StoreAway`, which
a writer keeps its rows through (as through a full disk) and a client is answered 503.
The connection is shared by the event loop's thread and the writer's, one statement or
one transaction at a time.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import Dumper
from psycopg.rows import DictRow, dict_row

from fluksio.engine.database import Cursor, Statements
from fluksio.engine.postgres.fence import Fence
from fluksio.errors import StorageFull, StoreAway

__all__ = ["PostgresDatabase", "faults", "first_line", "reads", "said"]

Connect = Callable[[], "psycopg.Connection[DictRow]"]


class _BoolAsBigint(Dumper):
    """``True`` as 1: the schema keeps a flag in a BIGINT, as SQLite's INTEGER."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


def reads(sql: str) -> bool:
    """A statement that only reads: no fence to check before it."""
    return sql.lstrip()[:6].upper() == "SELECT"


@functools.lru_cache(maxsize=1024)
def said(sql: str) -> str:
    """A statement with ``?`` placeholders as psycopg takes it (``%s``, ``%%``)."""
    return sql.replace("%", "%%").replace("?", "%s")


def prepared(connection: psycopg.Connection[DictRow]) -> psycopg.Connection[DictRow]:
    """A new connection made ready for the stores: rows by name, flags as numbers."""
    connection.row_factory = dict_row
    connection.autocommit = True  # a transaction is always an explicit one
    connection.adapters.register_dumper(bool, _BoolAsBigint)
    return connection


class _InTransaction:
    """The statements of one transaction (the connection's, under the database's lock);
    with a fence, its first write checks the lease first."""

    def __init__(self, connection: psycopg.Connection[DictRow], fence: Fence | None) -> None:
        self._connection = connection
        self._fence = fence

    def execute(self, sql: str, params: Sequence[object] = (), /) -> Cursor:
        if self._fence is not None and not reads(sql):
            self._check_fence()
        with faults():
            if not params:
                return self._connection.execute(sql.encode())
            return self._connection.execute(said(sql).encode(), params)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> object:
        if self._fence is not None:
            self._check_fence()
        with faults():
            cursor = self._connection.cursor()
            cursor.executemany(said(sql).encode(), rows)
            return cursor

    def _check_fence(self) -> None:
        fence, self._fence = self._fence, None  # once a transaction: the lock is held on
        assert fence is not None
        with faults():
            row = self._connection.execute(Fence.CHECK.encode()).fetchone()
        refused = fence.refused(row)
        if refused is not None:
            raise refused


class PostgresDatabase:
    """A :class:`~fluksio.engine.database.Database` on PostgreSQL."""

    def __init__(self, connect: Connect, where: str, fence: Fence | None = None) -> None:
        self._connect = connect
        self._where = where
        self._fence = fence
        """Set on the active engine of several: each transaction's first write checks it."""
        self._lock = threading.RLock()
        self._connection: psycopg.Connection[DictRow] | None = None

    @property
    def where(self) -> str:
        return self._where

    def execute(self, sql: str, params: Sequence[object] = (), /) -> Cursor:
        if self._fence is not None and not reads(sql):
            with self.transaction() as statements:  # its fence's check, then the write
                return statements.execute(sql, params)
        with self._lock:  # one statement: no BEGIN and COMMIT around it, two round trips
            return _InTransaction(self._connected(), None).execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]], /) -> object:
        with self.transaction() as statements:
            return statements.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[Statements]:
        with self._lock:
            connection = self._connected()
            with faults(), connection.transaction():
                yield _InTransaction(connection, self._fence)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _connected(self) -> psycopg.Connection[DictRow]:
        if self._connection is not None and not self._connection.broken:
            return self._connection
        with faults():
            self._connection = self._connect()
        return self._connection


@contextmanager
def faults() -> Iterator[None]:
    """The driver's faults as the engine's: away (try again later) or full."""
    try:
        yield
    except pg_errors.DiskFull as exc:
        raise StorageFull(
            "the engine could not write its state: the database's disk is full; nothing of"
            " this change was kept"
        ) from exc
    except psycopg.OperationalError as exc:
        raise StoreAway(
            f"the engine's database cannot be reached ({first_line(exc)}); try again shortly"
        ) from exc


def first_line(exc: BaseException) -> str:
    """A driver's error in its own first words, without libpq's framing."""
    lines = str(exc).strip().splitlines()
    return lines[0].removeprefix("connection failed: ") if lines else type(exc).__name__
