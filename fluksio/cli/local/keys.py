"""``fluksio keys rotate``: replace the signing key, revoking every token it signed at once.

A personal API token is not signed with the key (the engine keeps its digest): it is its
user's own credential, and survives a rotation until it is revoked or its user removed.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from fluksio.cli.local.options import state_options
from fluksio.engine.keys import KeyRing
from fluksio.engine.settings import EngineSettings
from fluksio.engine.state import open_state
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.errors import ConfigError

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """The engine's signing key."""


@keys.command()
@state_options("database_key_file")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def rotate(yes: bool, **where: Any) -> None:
    """Replace the signing key: every access and worker token stops working at once
    (personal API tokens, which it does not sign, keep working).

    Works whether or not the engine is running; a running engine uses the new key for the
    next request (on PostgreSQL, within 2 s, every engine of the database).
    """
    settings = EngineSettings(**where)
    layout = settings.layout
    if settings.database is None and not layout.database.exists():
        raise ConfigError(f"{settings.data_dir} holds no Fluksio state; check --data-dir")
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError("rotating revokes every token; pass --yes to confirm")
        click.confirm("Revoke every access and worker token by replacing the key?", abort=True)
    state = open_state(settings, layout.ensure())
    try:
        KeyRing(state.keys).rotate()
        revoked = WorkerTokenStore(state.database).revoke_all("signing key rotated")
    finally:
        state.database.close()
    click.echo(
        f"Signing key replaced: {revoked} worker token(s) revoked and every access token"
        " invalidated; personal API tokens keep working (the key does not sign them:"
        " fluksio personal-tokens revoke ID ends one). Mint new worker tokens and log in"
        " again."
    )
