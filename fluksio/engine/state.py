"""The engine's database, as its settings name it: PostgreSQL at ``--database``, or else
SQLite in the data directory (zero setup)."""

from __future__ import annotations

from fluksio.engine.database import Database
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.settings import EngineSettings

__all__ = ["open_state"]


def open_state(settings: EngineSettings, layout: DataDir) -> Database:
    """Open and migrate the engine's database; a sentence naming it when it cannot be."""
    if settings.database is None:
        return open_database(layout.database)
    # Imported here: an engine on SQLite never loads the PostgreSQL driver (0.16 s).
    from fluksio.engine.postgres.opening import open_postgres  # noqa: PLC0415 - 0.16 s

    return open_postgres(settings.database, settings.database_password_file)
