"""A map's items as the engine takes them: JSON lines, each the parameters of one call
of its array, sent as artifacts a batch at a time, so that the client holds a batch of
them at once, never the whole sweep."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from fluksio.client.sending import as_json, check_arguments

__all__ = ["BATCH_BYTES", "ITEMS_PER_BATCH", "item_batches"]

ITEMS_PER_BATCH = 50_000
BATCH_BYTES = 8 << 20
"""A map's items go to the engine in artifacts of at most this many items and bytes:
what the client holds of them at once."""


def item_batches(name: str, items: Iterator[tuple[Any, ...]], chunksize: int) -> Iterator[bytes]:
    """A map's items as JSON lines, each the parameters of one call (``chunksize``
    argument lists, or one), in batches of at most :data:`ITEMS_PER_BATCH` lines and
    about :data:`BATCH_BYTES`; an argument that is not JSON is refused, naming it."""
    lines: list[bytes] = []
    size = 0
    while chunk := [list(item) for item in itertools.islice(items, chunksize)]:
        args: list[Any] = chunk if chunksize > 1 else chunk[0]
        try:
            text = json.dumps(
                {"args": args, "kwargs": {}},
                separators=(",", ":"),
                allow_nan=False,
                default=as_json,
            )
        except (TypeError, ValueError):
            for arguments in chunk:  # which one, in a sentence
                check_arguments(name, tuple(arguments), {})
            raise
        line = text.encode() + b"\n"
        lines.append(line)
        size += len(line)
        if len(lines) >= ITEMS_PER_BATCH or size >= BATCH_BYTES:
            yield b"".join(lines)
            lines, size = [], 0
    if lines:
        yield b"".join(lines)
