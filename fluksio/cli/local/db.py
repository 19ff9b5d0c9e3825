"""``fluksio db copy --to URL``: an engine's SQLite state moved into an empty PostgreSQL
database, with the engine stopped (:mod:`fluksio.engine.postgres.copy`)."""

from __future__ import annotations

from pathlib import Path

import click

from fluksio.cli.local.options import setting_option
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.holding import DataDirBusy, data_dir_lock
from fluksio.engine.key_places import KeyFiles, SealedKeys, sealing_key
from fluksio.errors import ConfigError

__all__ = ["db"]


@click.group()
def db() -> None:
    """The engine's state database."""


@db.command()
@click.option(
    "--to",
    "to",
    required=True,
    metavar="URL",
    help="The empty PostgreSQL database: postgresql://USER@HOST:PORT/NAME (no password).",
)
@setting_option("data_dir")
@setting_option("database_password_file")
@setting_option("database_key_file")
def copy(
    to: str, data_dir: Path, database_password_file: Path | None, database_key_file: Path | None
) -> None:
    """Copy the data directory's state (SQLite, and the engine's keys) into an empty
    PostgreSQL database, the engine stopped; each table's rows are counted on both sides."""
    layout = DataDir(data_dir)
    if not layout.database.exists():
        raise ConfigError(f"{data_dir} holds no Fluksio state; check --data-dir")
    if database_key_file is None:
        raise ConfigError(
            "--database-key-file: the file that will seal the engine's keys in the database"
            " (make one with `openssl rand -base64 32 > FILE`); give the engines the same"
        )
    sealing = sealing_key(database_key_file)
    # Imported here: only this command and an engine on PostgreSQL load the driver.
    from fluksio.engine.postgres.copy import copy_state  # noqa: PLC0415
    from fluksio.engine.postgres.opening import open_postgres  # noqa: PLC0415

    try:
        with data_dir_lock(layout):
            source = open_database(layout.database)
            target = open_postgres(to, database_password_file)
            try:
                copied = copy_state(source, target, KeyFiles(layout), SealedKeys(target, sealing))
            finally:
                target.close()
                source.close()
    except DataDirBusy as busy:
        raise ConfigError(
            f"an engine is running on {data_dir} (pid {busy.pid}); stop it first: the copy"
            " must be of a state nothing changes"
        ) from None
    width = max(len(c.table) for c in copied)
    for c in copied:
        click.echo(f"{c.table:<{width}}  {c.rows:>10,}")
    click.echo(
        f"Copied {sum(c.rows for c in copied):,} rows of {len(copied)} tables into"
        f" {target.where}, and the engine's keys, sealed. Start it with --database {to}"
        f" --database-key-file {database_key_file} --artifacts-dir {layout.artifacts} (or"
        " copy the artifacts where every engine of the database reaches them)."
    )
