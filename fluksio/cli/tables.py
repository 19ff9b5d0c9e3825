"""Plain-text tables for the commands that list things."""

from __future__ import annotations

import click

__all__ = ["table"]


def table(rows: list[list[str]], headings: list[str]) -> None:
    """Columns as wide as their widest cell; the last one as long as it is."""
    widths = [max(len(str(row[i])) for row in [headings, *rows]) for i in range(len(headings))]
    for row in [headings, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        click.echo("  ".join([*cells, str(row[-1])]).rstrip())
