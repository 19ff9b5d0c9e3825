"""The engine's database of either kind, for tests that hold for both: SQLite in a
temporary directory, or an empty PostgreSQL database of the test's own on the local
cluster (``make postgres-up``), migrated as an engine opens it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fluksio.engine.database import Database
from fluksio.engine.db import open_database
from fluksio.engine.postgres.opening import open_postgres
from tests.support.postgres import fresh_database, local_postgres

__all__ = ["KINDS", "opened"]

KINDS = ("sqlite", pytest.param("postgres", marks=pytest.mark.contract))
"""Each kind of database, for ``@pytest.mark.parametrize``: the PostgreSQL one is a
contract test (a real server), so ``make test-fast`` leaves it out."""


@contextmanager
def opened(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Database]:
    if kind == "sqlite":
        database: Database = open_database(tmp_path / "fluksio.sqlite3")
        try:
            yield database
        finally:
            database.close()
        return
    cluster = local_postgres()
    monkeypatch.setenv("PGPASSFILE", cluster.passfile)
    with fresh_database(cluster) as url:
        database = open_postgres(url)
        try:
            yield database
        finally:
            database.close()
