"""A call's input artifacts, as the scheduler weighs them: the references its arguments
hold (``{"digest": "sha256:...", "size": n, ...}``, anywhere within them)."""

from __future__ import annotations

__all__ = ["input_artifacts"]

_DIGEST_LENGTH = len("sha256:") + 64


def input_artifacts(arguments: object) -> tuple[tuple[str, int], ...]:
    """(digest, size in bytes) of each artifact ``arguments`` names, once each, in order; a
    reference that gives no size weighs nothing."""
    found: dict[str, int] = {}
    stack = [arguments]
    while stack:
        item = stack.pop()
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
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return tuple(found.items())
