"""Settings declared once: a dataclass field per setting, its :class:`Flag` beside its type
and default, and the command-line option made from the two.

The engine's settings (``fluksio serve``) and the worker's (``fluksio-worker``) are declared
this way, so an option cannot exist in one place and be missing or different in another:
its name, type, bounds, default, help and environment variable come from the declaration.
Here because the agent is installed alone, and the engine may import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from fluksio.agent.numbers import FiniteRange

__all__ = ["YEAR_AND_A_DAY_S", "Flag", "declared_flags", "flag_option", "setting", "value_type"]

YEAR_AND_A_DAY_S = 366 * 86400.0
"""The longest any duration setting may be: longer than any batch job or token, finite."""
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Flag:
    """How a setting is given on the command line (the rest comes from its field)."""

    help: str
    minimum: float | None = None
    maximum: float | None = None
    """Every number has both bounds, and is finite: ``nan``, ``inf`` and ``1e400`` are
    refused at start like any other value out of bounds."""
    above_minimum: bool = False
    """The minimum itself is refused (a wait of 0 s that would mean "never")."""
    choices: tuple[str, ...] = ()
    kind: type = str
    """The type of one value: ``str``, ``int``, ``float``, ``bool`` (a switch) or ``Path``."""
    name: str | None = None
    """The flag's name when it is not the field's (``--trusted-proxy`` gives many)."""
    many: bool = False
    """Repeatable: the setting is a tuple of every value given."""
    metavar: str | None = None
    negatable: bool = False
    """A switch that also has its ``--no-`` form (for a setting on by default)."""
    envvar: str | None = None
    """The environment variable that gives it, where the command does not derive one."""
    hidden: bool = False
    """Left out of ``--help``: for tests and for diagnosing, not for users."""


def setting(default: Any, flag: Flag) -> Any:
    """A dataclass field declaring one setting: its default and its flag."""
    return dataclasses.field(default=default, metadata={"flag": flag})


def declared_flags(settings: type) -> list[tuple[dataclasses.Field[Any], Flag]]:
    """Every field of a settings dataclass with its flag, in declaration order."""
    return [(f, f.metadata["flag"]) for f in dataclasses.fields(settings)]


def value_type(flag: Flag) -> click.ParamType[Any, Any] | type[Any]:
    """What click reads one value of the setting as, with its bounds or choices."""
    if flag.choices:
        return click.Choice(flag.choices)
    if flag.kind is Path:
        return click.Path(path_type=Path)
    if flag.kind in (int, float):
        if flag.minimum is None or flag.maximum is None:
            raise TypeError(f"a numeric setting needs both bounds: {flag.help}")
        if flag.kind is int:
            return click.IntRange(int(flag.minimum), int(flag.maximum))
        return FiniteRange(flag.minimum, flag.maximum, min_open=flag.above_minimum)
    return flag.kind


def flag_option(
    field: dataclasses.Field[Any],
    *,
    envvar: str | None,
    default: Any = dataclasses.MISSING,
    shown: Any = None,
    kind: Any = None,
) -> Callable[[F], F]:
    """The click option of one declared setting: ``--name-with-dashes`` (or the flag's
    name), given by ``envvar`` too, its default shown in ``--help`` unless it says nothing
    (none, empty, off). ``default``, ``shown`` and ``kind`` replace what is declared, for a
    default that depends on the environment. A field without a default is required."""
    flag: Flag = field.metadata["flag"]
    dashed = "--" + (flag.name or field.name.replace("_", "-"))
    if default is dataclasses.MISSING:
        default = field.default
    required = default is dataclasses.MISSING
    common: dict[str, Any] = {
        "envvar": envvar,
        "show_envvar": envvar is not None,
        "help": flag.help,
        "hidden": flag.hidden,
    }
    if flag.kind is bool:
        if flag.negatable:
            both = f"{dashed}/--no-{dashed[2:]}"
            return click.option(both, field.name, default=default, **common)
        return click.option(dashed, field.name, is_flag=True, default=default, **common)
    if required:
        common["required"] = True  # and no default at all: click takes None for a value
    else:
        common["default"] = default
        common["show_default"] = shown if shown is not None or default in (None, (), "") else True
    return click.option(
        dashed,
        field.name,
        type=kind if kind is not None else value_type(flag),
        multiple=flag.many,
        metavar=flag.metavar,
        **common,
    )
