"""``fluksio keys rotate``: replace the signing key, revoking every token it signed at once.

A personal API token is not signed with the key (the engine keeps its digest): it is its
user's own credential, and survives a rotation until it is revoked or its user removed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fluksio.cli.local.options import data_dir_option
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.key_places import KeyFiles
from fluksio.engine.keys import KeyRing
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.errors import ConfigError

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """The engine's signing key."""


@keys.command()
@data_dir_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def rotate(data_dir: Path, yes: bool) -> None:
    """Replace the signing key: every access and worker token stops working at once
    (personal API tokens, which it does not sign, keep working).

    Works whether or not the engine is running; a running engine uses the new key for the
    next request.
    """
    layout = DataDir(data_dir)
    if not layout.database.exists():
        raise ConfigError(f"{data_dir} holds no Fluksio state; check --data-dir")
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError("rotating revokes every token; pass --yes to confirm")
        click.confirm("Revoke every access and worker token by replacing the key?", abort=True)
    database = open_database(layout.ensure().database)
    try:
        KeyRing(KeyFiles(layout)).rotate()
        revoked = WorkerTokenStore(database).revoke_all("signing key rotated")
    finally:
        database.close()
    click.echo(
        f"Signing key replaced: {revoked} worker token(s) revoked and every access token"
        " invalidated; personal API tokens keep working (the key does not sign them:"
        " fluksio personal-tokens revoke ID ends one). Mint new worker tokens and log in"
        " again."
    )
