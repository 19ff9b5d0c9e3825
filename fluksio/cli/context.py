"""The ``--url``/data-dir options every API-talking command group shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from fluksio.cli.client import client_from_environment
from fluksio.cli.local.options import data_dir_option
from fluksio.client.client import Client

__all__ = ["api_group", "client_of", "url_option"]

F = TypeVar("F", bound=Callable[..., Any])


url_option = click.option(
    "--url",
    envvar="FLUKSIO_URL",
    multiple=True,
    help="The engine's API base, ending in /api/v1; repeatable: the engines of one database,"
    " the next asked while one is a standby.",
)
"""Where the engine is: ``--url`` given once or more, or ``$FLUKSIO_URL``."""


def api_group(help_text: str) -> Callable[[F], click.Group]:
    """A click group whose commands reach the engine the ``--url`` option (or the data
    directory) names, through :func:`client_of`."""

    def decorate(function: F) -> click.Group:
        @url_option
        @data_dir_option
        @click.pass_context
        def group(ctx: click.Context, url: tuple[str, ...], data_dir: Path) -> None:
            ctx.obj = _Where(url, data_dir)

        group.__doc__ = help_text
        group.__name__ = function.__name__
        return click.group(name=function.__name__.rstrip("_"), cls=_ApiGroup)(group)

    return decorate


_URL_KEY = "fluksio.url"


def _url_after(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    if value:
        ctx.meta[_URL_KEY] = value


class _ApiGroup(click.Group):
    """A group whose commands take ``--url`` after their name too (``fluksio runs list
    --url URL``), as people type it; it wins over the group's and ``$FLUKSIO_URL``."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.params.append(
            click.Option(
                ["--url"],
                multiple=True,
                expose_value=False,
                callback=_url_after,
                help="The engine's API base (as the group's --url).",
            )
        )
        super().add_command(cmd, name)


@dataclass(frozen=True)
class _Where:
    url: tuple[str, ...]
    data_dir: Path


def client_of(ctx: click.Context) -> Client:
    """The engine's client, logged in from the environment."""
    where = ctx.find_object(_Where)
    assert where is not None, "used under an api_group"
    return client_from_environment(ctx.meta.get(_URL_KEY, where.url), where.data_dir)
