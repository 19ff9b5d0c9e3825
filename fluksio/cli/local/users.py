"""``fluksio users add|list|role|remove``: the engine's users, in its data directory (the
engine may be running: a change takes effect at the user's next request).

Two roles: a **user** reads workers and resources, puts flows, starts, reads and cancels
runs (everyone's: an engine is a team's), and moves artifacts; a **superuser** also
manages worker tokens, scrape tokens, secrets and users.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
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
@click.option(
    "--superuser", is_flag=True, help="Also manages worker and scrape tokens, secrets and users."
)
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
    with _store(data_dir) as store:
        store.add(username, password, is_superuser=superuser)
    kind = "superuser" if superuser else "user"
    click.echo(f"Added {kind} {username!r}.")


@contextlib.contextmanager
def _store(data_dir: Path) -> Iterator[UserStore]:
    database = open_database(DataDir(data_dir).ensure().database)
    try:
        yield UserStore(database)
    finally:
        database.close()


@users.command(name="list")
@data_dir_option
def list_users(data_dir: Path) -> None:
    """List the users and their roles."""
    with _store(data_dir) as store:
        found = store.all()
    for user in found:
        click.echo(f"{user.username:32} {'superuser' if user.is_superuser else 'user'}")


@users.command()
@click.argument("username")
@click.argument("new_role", metavar="ROLE", type=click.Choice(["user", "superuser"]))
@data_dir_option
def role(username: str, new_role: str, data_dir: Path) -> None:
    """Make USERNAME a user or a superuser (from its next request on)."""
    with _store(data_dir) as store:
        store.set_superuser(username, new_role == "superuser")
    click.echo(f"{username!r} is now a {new_role}.")


@users.command()
@click.argument("username")
@data_dir_option
def remove(username: str, data_dir: Path) -> None:
    """Remove USERNAME: its access tokens stop working at once."""
    with _store(data_dir) as store:
        store.remove(username)
    click.echo(f"Removed {username!r}.")
