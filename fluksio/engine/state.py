"""The engine's database and its own keys, as its settings name them: PostgreSQL at
``--database`` with the keys sealed in it, or else SQLite in the data directory with the
keys beside it (zero setup)."""

from __future__ import annotations

from dataclasses import dataclass

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.key_places import KeyFiles, KeyPlace, SealedKeys, sealing_key
from fluksio.engine.postgres.fence import Fence
from fluksio.engine.settings import EngineSettings
from fluksio.errors import ConfigError

__all__ = ["State", "open_state", "open_state_database"]


@dataclass(frozen=True)
class State:
    database: Database
    keys: KeyPlace


def open_state(
    settings: EngineSettings,
    layout: DataDir,
    clock: Clock = SYSTEM_CLOCK,
    fence: Fence | None = None,
) -> State:
    """Open and migrate the engine's database, and find its keys; a sentence naming what
    cannot be used."""
    if settings.database is None:
        return State(open_database(layout.database), KeyFiles(layout))
    if settings.database_key_file is None:
        from fluksio.engine.postgres.opening import where_of  # noqa: PLC0415 - as below

        where_of(settings.database)  # a URL that cannot be is said first
        raise ConfigError(
            "--database needs --database-key-file: a file every engine of the database is"
            " given, which seals the engine's keys kept there (make one with"
            " `openssl rand -base64 32 > FILE`, readable by the engine alone)"
        )
    sealing = sealing_key(settings.database_key_file)
    database = open_state_database(settings, layout, fence)
    return State(database, SealedKeys(database, sealing, clock))


def open_state_database(
    settings: EngineSettings, layout: DataDir, fence: Fence | None = None
) -> Database:
    """The engine's database alone (what ``fluksio users`` changes)."""
    if settings.database is None:
        return open_database(layout.database)
    # Imported here: an engine on SQLite never loads the PostgreSQL driver (0.16 s).
    from fluksio.engine.postgres.opening import open_postgres  # noqa: PLC0415

    return open_postgres(settings.database, settings.database_password_file, fence)
