"""The ``--url``/data-dir options every API-talking command group shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fluksio.cli.client import ApiClient, resolve_api_url
from fluksio.cli.local.options import data_dir_option

__all__ = ["api_group", "client_of"]

F = TypeVar("F", bound=Callable[..., Any])


def api_group(help_text: str) -> Callable[[F], click.Group]:
    """A click group whose context object is an :class:`ApiClient` for the engine."""

    def decorate(function: F) -> click.Group:
        @click.option(
            "--url", envvar="FLUKSIO_URL", help="The engine's API base, ending in /api/v1."
        )
        @data_dir_option
        @click.pass_context
        def group(ctx: click.Context, url: str | None, data_dir: Path) -> None:
            ctx.obj = ApiClient(resolve_api_url(url, data_dir))

        group.__doc__ = help_text
        group.__name__ = function.__name__
        return click.group(name=function.__name__.rstrip("_"))(group)

    return decorate


def client_of(ctx: click.Context) -> ApiClient:
    client = ctx.find_object(ApiClient)
    assert client is not None, "used under an api_group"
    client.login_from_environment()
    return client
