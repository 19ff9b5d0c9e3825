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
from typing import Any

import click

from fluksio.cli.local.options import state_options
from fluksio.engine.settings import EngineSettings
from fluksio.engine.state import open_state_database
from fluksio.engine.users import UserStore
from fluksio.errors import ConfigError
from fluksio.names import NAME_RULE, is_name

__all__ = ["users"]


@click.group()
def users() -> None:
    """Engine users."""


@users.command()
@click.argument("username")
@state_options()
@click.option(
    "--superuser", is_flag=True, help="Also manages worker and scrape tokens, secrets and users."
)
@click.option(
    "--password-stdin", is_flag=True, help="Read the password from stdin instead of prompting."
)
def add(username: str, superuser: bool, password_stdin: bool, **where: Any) -> None:
    """Add USERNAME; the password is prompted for or read from stdin, never an argument."""
    if not is_name(username):
        raise ConfigError(f"USERNAME {NAME_RULE}")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if len(password) < 8:
        raise ConfigError("the password must be at least 8 characters long")
    with _store(where) as store:
        store.add(username, password, is_superuser=superuser)
    kind = "superuser" if superuser else "user"
    click.echo(f"Added {kind} {username!r}.")


@contextlib.contextmanager
def _store(where: dict[str, Any]) -> Iterator[UserStore]:
    settings = EngineSettings(**where)
    database = open_state_database(settings, settings.layout.ensure())
    try:
        yield UserStore(database)
    finally:
        database.close()


@users.command(name="list")
@state_options()
def list_users(**where: Any) -> None:
    """List the users and their roles."""
    with _store(where) as store:
        found = store.all()
    for user in found:
        click.echo(f"{user.username:32} {'superuser' if user.is_superuser else 'user'}")


@users.command()
@click.argument("username")
@click.argument("new_role", metavar="ROLE", type=click.Choice(["user", "superuser"]))
@state_options()
def role(username: str, new_role: str, **where: Any) -> None:
    """Make USERNAME a user or a superuser (from its next request on)."""
    with _store(where) as store:
        store.set_superuser(username, new_role == "superuser")
    click.echo(f"{username!r} is now a {new_role}.")


@users.command()
@click.argument("username")
@state_options()
def remove(username: str, **where: Any) -> None:
    """Remove USERNAME: its access tokens stop working at once."""
    with _store(where) as store:
        store.remove(username)
    click.echo(f"Removed {username!r}.")
