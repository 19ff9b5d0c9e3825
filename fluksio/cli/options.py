"""Options shared by several commands."""

from __future__ import annotations

from pathlib import Path

import click

from fluksio.engine.datadir import default_data_dir

__all__ = ["data_dir_option"]

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=default_data_dir,
    show_default="$FLUKSIO_DATA_DIR, else ~/.local/share/fluksio",
    help="Where the engine keeps its state.",
)
