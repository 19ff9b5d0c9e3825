"""Options made from the engine's setting declarations, and those several commands share.

Each option of ``fluksio serve`` comes from a field of
:class:`~fluksio.engine.settings.EngineSettings`: its flag ``--name-with-dashes``, its
environment variable ``FLUKSIO_NAME``, its type, bounds, default and help. Nothing about a
setting is written here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fluksio.agent.numbers import FiniteRange
from fluksio.engine.datadir import default_data_dir
from fluksio.engine.settings import EngineSettings, Flag

__all__ = ["data_dir_option", "setting_option", "settings_options"]

F = TypeVar("F", bound=Callable[..., Any])


def _declared() -> list[tuple[dataclasses.Field[Any], Flag]]:
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(EngineSettings)]


def _setting_names() -> list[str]:
    """Every setting's field name, in declaration order."""
    return [f.name for f, _flag in _declared()]


def _type(flag: Flag) -> click.ParamType[Any, Any] | type[Any]:
    if flag.choices:
        return click.Choice(flag.choices)
    if flag.kind is Path:
        return click.Path(path_type=Path)
    if flag.kind in (int, float):
        if flag.minimum is None or flag.maximum is None:
            raise TypeError(f"a numeric setting needs both bounds: {flag.help}")
        if flag.kind is int:
            return click.IntRange(int(flag.minimum), int(flag.maximum))
        return FiniteRange(flag.minimum, flag.maximum)
    return flag.kind


def setting_option(name: str) -> Callable[[F], F]:
    """The option of one setting, as declared."""
    (found,) = [(f, flag) for f, flag in _declared() if f.name == name]
    declared, flag = found
    dashed = "--" + (flag.name or name.replace("_", "-"))
    envvar = "FLUKSIO_" + name.upper()
    if name == "data_dir":  # its default depends on the environment, not a constant
        default: Any = default_data_dir
        shown: Any = "$FLUKSIO_DATA_DIR, else ~/.local/share/fluksio"
        envvar = "FLUKSIO_DATA_DIR"
        kind: Any = click.Path(file_okay=False, path_type=Path)
    else:
        default = declared.default
        shown = None if default is None or default == () else True
        kind = _type(flag)
    if flag.kind is bool:
        return click.option(
            dashed,
            name,
            is_flag=True,
            default=default,
            envvar=envvar,
            show_envvar=True,
            help=flag.help,
        )
    return click.option(
        dashed,
        name,
        type=kind,
        default=default,
        show_default=shown,
        multiple=flag.many,
        metavar=flag.metavar,
        envvar=envvar,
        show_envvar=True,
        help=flag.help,
    )


def settings_options(command: F) -> F:
    """Every setting's option, in the order they are declared."""
    for name in reversed(_setting_names()):
        command = setting_option(name)(command)
    return command


data_dir_option = setting_option("data_dir")
