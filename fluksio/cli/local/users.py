"""``fluksio users add``: add a user to the data directory (the engine may be running)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fluksio.cli.local.options import data_dir_option
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.users import UserStore
from fluksio.errors import ConfigError
from fluksio.names import NAME_RULE, is_name

__all__ = ["users"]


@click.group()
def users() -> None:
    """Engine users."""


@users.command()
@click.argument("username")
@data_dir_option
@click.option("--superuser", is_flag=True, help="May mint and revoke tokens.")
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from stdin instead of prompting."
)
def add(username: str, data_dir: Path, superuser: bool, password_stdin: bool) -> None:
    """Add USERNAME; the password is prompted for or read from stdin, never an argument."""
    if not is_name(username):
        raise ConfigError(f"USERNAME {NAME_RULE}")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if len(password) < 8:
        raise ConfigError("the password must be at least 8 characters long")
    database = open_database(DataDir(data_dir).ensure().database)
    try:
        UserStore(database).add(username, password, is_superuser=superuser)
    finally:
        database.close()
    kind = "superuser" if superuser else "user"
    click.echo(f"Added {kind} {username!r}.")
