"""Options made from the engine's setting declarations, and those several commands share.

Each option of ``fluksio serve`` comes from a field of
:class:`~fluksio.engine.settings.EngineSettings`: its flag ``--name-with-dashes``, its
environment variable ``FLUKSIO_NAME``, its type, bounds, default and help
(:func:`~fluksio.agent.declared.flag_option`). Nothing about a setting is written here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fluksio.agent.declared import declared_flags, flag_option
from fluksio.engine.datadir import default_data_dir
from fluksio.engine.settings import EngineSettings

__all__ = ["data_dir_option", "setting_option", "settings_options", "state_options"]

F = TypeVar("F", bound=Callable[..., Any])


def setting_option(name: str) -> Callable[[F], F]:
    """The option of one setting, as declared."""
    (declared,) = [f for f, _flag in declared_flags(EngineSettings) if f.name == name]
    if name == "data_dir":  # its default depends on the environment, not a constant
        return flag_option(
            declared,
            envvar="FLUKSIO_DATA_DIR",
            default=default_data_dir,
            shown="$FLUKSIO_DATA_DIR, else ~/.local/share/fluksio",
            kind=click.Path(file_okay=False, path_type=Path),
        )
    return flag_option(declared, envvar="FLUKSIO_" + name.upper())


def settings_options(command: F) -> F:
    """Every setting's option, in the order they are declared."""
    for declared, _flag in reversed(declared_flags(EngineSettings)):
        command = setting_option(declared.name)(command)
    return command


data_dir_option = setting_option("data_dir")


def state_options(*more: str) -> Callable[[F], F]:
    """The options that say where the engine's state is (the data directory, or the
    PostgreSQL database and its password file), and the settings ``more`` names."""

    def decorated(command: F) -> F:
        for name in reversed(("data_dir", "database", "database_password_file", *more)):
            command = setting_option(name)(command)
        return command

    return decorated
