"""``fluksio``: the engine's command line.

Every failure a user can cause is one sentence on stderr and exit code 2; tracebacks are
for bugs only.
"""

from __future__ import annotations

from typing import Any

import click

from fluksio.agent.cli import main as worker_command
from fluksio.api.cli.flows import flows
from fluksio.api.cli.keys import keys
from fluksio.api.cli.provisioners import provisioners
from fluksio.api.cli.runs import runs
from fluksio.api.cli.serve import serve
from fluksio.api.cli.tokens import tokens
from fluksio.api.cli.users import users
from fluksio.errors import FluksioError

__all__ = ["UserError", "cli", "main"]


class UserError(click.ClickException):
    """One sentence on stderr, exit code 2."""

    exit_code = 2


class _Group(click.Group):
    """Turns every deliberate error into one sentence and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FluksioError as error:
            raise UserError(error.detail) from None


@click.group(cls=_Group)
@click.version_option(package_name="fluksio", prog_name="fluksio")
def cli() -> None:
    """Fluksio: one engine, many workers; node code runs where the hardware lives."""


cli.add_command(serve)
cli.add_command(keys)
cli.add_command(tokens)
cli.add_command(flows)
cli.add_command(runs)
cli.add_command(provisioners)
cli.add_command(users)
cli.add_command(worker_command, name="worker")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
