"""Plain-text tables for the commands that list things."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click
from pydantic import BaseModel, TypeAdapter

__all__ = ["json_text", "table", "when"]


def table(rows: list[list[str]], headings: list[str]) -> None:
    """Columns as wide as their widest cell; the last one as long as it is."""
    widths = [max(len(str(row[i])) for row in [headings, *rows]) for i in range(len(headings))]
    for row in [headings, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        click.echo("  ".join([*cells, str(row[-1])]).rstrip())


_TIME = TypeAdapter(datetime)
_ANY = TypeAdapter(Any)


def when(value: datetime | None) -> str:
    """A time as the engine's JSON writes it (ISO 8601, UTC, ``Z``); ``-`` for none."""
    return "-" if value is None else str(_TIME.dump_python(value, mode="json"))


def json_text(answer: BaseModel | Sequence[BaseModel]) -> str:
    """An answer as JSON, as the engine sent it (its models serialise it the same way)."""
    return json.dumps(_ANY.dump_python(answer, mode="json"), indent=2)
