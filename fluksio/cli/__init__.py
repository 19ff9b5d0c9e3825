"""``fluksio``: the engine's command line.

Every failure a user can cause is one sentence on stderr, with exit code 2 (a usage
error, or an engine that cannot be reached) or 3 (the engine refused: not logged in,
not allowed, no such thing, a bad field); tracebacks are for bugs only.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from fluksio.client.errors import EngineRefused
from fluksio.errors import FluksioError

__all__ = ["Refused", "UserError", "cli", "main"]


class UserError(click.ClickException):
    """One sentence on stderr, exit code 2."""

    exit_code = 2


class Refused(UserError):
    """The engine refused: one sentence on stderr, exit code 3."""

    exit_code = 3


_COMMANDS = {
    "serve": "fluksio.cli.local.serve:serve",
    "keys": "fluksio.cli.local.keys:keys",
    "db": "fluksio.cli.local.db:db",
    "tokens": "fluksio.cli.tokens:tokens",
    "personal-tokens": "fluksio.cli.personal_tokens:personal_tokens",
    "flows": "fluksio.cli.flows:flows",
    "runs": "fluksio.cli.runs:runs",
    "workers": "fluksio.cli.workers:workers",
    "metrics": "fluksio.cli.metrics:metrics",
    "provisioners": "fluksio.cli.local.provisioners:provisioners",
    "users": "fluksio.cli.local.users:users",
    "worker": "fluksio.agent.cli:main",
}
"""Each subcommand's module, imported only when it runs: ``fluksio tokens list`` need not
load the engine's web server (about half a second of imports) to talk to it."""


class _Group(click.Group):
    """Loads subcommands on demand; turns every deliberate error into one sentence, exit 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, name = target.partition(":")
        command: click.Command = getattr(importlib.import_module(module), name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EngineRefused as error:
            raise Refused(error.detail) from None
        except FluksioError as error:
            raise UserError(error.detail) from None


@click.group(cls=_Group)
@click.version_option(package_name="fluksio", prog_name="fluksio")
def cli() -> None:
    """Fluksio: one engine, many workers; node code runs where the hardware lives."""


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
