"""A call's input artifacts, as the scheduler weighs them: the references its arguments
hold (``{"digest": "sha256:...", "size": n, ...}``, anywhere within them)."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["VALUES_READ", "input_artifacts"]

_END = object()

_DIGEST_LENGTH = len("sha256:") + 64
VALUES_READ = 10_000
"""How many values of a call's arguments are looked through, at most: this runs as each
call is queued, and a large result handed on (a list of a million numbers) must not cost
that call the whole walk. References to inputs stand near the top."""


def input_artifacts(arguments: object) -> tuple[tuple[str, int], ...]:
    """(digest, size in bytes) of each artifact ``arguments`` names, once each, in order; a
    reference that gives no size weighs nothing; past :data:`VALUES_READ`, no more."""
    found: dict[str, int] = {}
    # Depth first, in order, one value at a time: a large list is never copied whole.
    stack: list[Iterator[object]] = [iter((arguments,))]
    read = 0
    while stack and read < VALUES_READ:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        read += 1
        if isinstance(item, dict):
            digest = item.get("digest")
            if (
                isinstance(digest, str)
                and len(digest) == _DIGEST_LENGTH
                and digest.startswith("sha256:")
                and digest not in found
            ):
                size = item.get("size")
                found[digest] = size if isinstance(size, int) and size > 0 else 0
            stack.append(iter(item.values()))
        elif isinstance(item, list):
            stack.append(iter(item))
    return tuple(found.items())
