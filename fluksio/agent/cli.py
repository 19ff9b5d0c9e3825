"""``fluksio-worker`` (also ``fluksio worker``): the agent's command line."""

from __future__ import annotations

import click

from fluksio.agent import __version__

__all__ = ["main"]


@click.command(name="fluksio-worker", no_args_is_help=True)
@click.version_option(__version__, prog_name="fluksio-worker")
def main() -> None:
    """Attach this machine to a Fluksio engine and run the node calls it sends.

    This release carries the version only; attaching ships with protocol 2 support.
    """
