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

__all__ = ["api_group", "client_of"]

F = TypeVar("F", bound=Callable[..., Any])


def api_group(help_text: str) -> Callable[[F], click.Group]:
    """A click group whose commands reach the engine the ``--url`` option (or the data
    directory) names, through :func:`client_of`."""

    def decorate(function: F) -> click.Group:
        @click.option(
            "--url", envvar="FLUKSIO_URL", help="The engine's API base, ending in /api/v1."
        )
        @data_dir_option
        @click.pass_context
        def group(ctx: click.Context, url: str | None, data_dir: Path) -> None:
            ctx.obj = _Where(url, data_dir)

        group.__doc__ = help_text
        group.__name__ = function.__name__
        return click.group(name=function.__name__.rstrip("_"))(group)

    return decorate


@dataclass(frozen=True)
class _Where:
    url: str | None
    data_dir: Path


def client_of(ctx: click.Context) -> Client:
    """The engine's client, logged in from the environment."""
    where = ctx.find_object(_Where)
    assert where is not None, "used under an api_group"
    return client_from_environment(where.url, where.data_dir)
