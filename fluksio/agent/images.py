"""An image reference read as its runtime reads it, and the ``--allow-image`` rule.

A reference is a name (``registry.example/team/cuda:12.4``, ``...@sha256:<hex>``), or a
file behind a transport (``oci-archive:/images/tool.tar``, ``/images/tool.sif``). Either is
a path of ``/``-separated segments: one that is empty, ``.`` or ``..`` is refused, since a
runtime (or the file system) reads it as another place than the text shows (an archive
outside the folder a pattern names). A pattern matches segment by segment, ``fnmatch``'s
way within each: its ``*`` never crosses a ``/``.
"""

from __future__ import annotations

import fnmatch
import re

__all__ = ["FILE_TRANSPORTS", "image_file", "image_matches", "image_refusal"]

FILE_TRANSPORTS = ("oci-archive:", "docker-archive:", "oci:", "dir:")
"""Transports whose reference is a path on the worker (resolved before it is matched)."""
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://")


def _segments(image: str) -> list[str]:
    scheme = _SCHEME.match(image)
    rest = image[scheme.end() :] if scheme else image
    transport = next((t for t in FILE_TRANSPORTS if rest.startswith(t)), "")
    rest = rest[len(transport) :]
    return rest[1:].split("/") if rest.startswith("/") else rest.split("/")


def image_refusal(image: str) -> str | None:
    """Why ``image`` is no reference a pattern can be trusted to match; None: it is."""
    for segment in _segments(image):
        if segment in ("", ".", ".."):
            shown = segment or "an empty segment"
            return (
                f"image {image!r} holds {shown!r} between its '/': a runtime would read it as"
                " another place than it names"
            )
    return None


def image_matches(pattern: str, image: str) -> bool:
    """Whether ``pattern`` matches ``image``, segment by segment (``*`` within one)."""
    wanted, given = pattern.split("/"), image.split("/")
    return len(wanted) == len(given) and all(map(fnmatch.fnmatchcase, given, wanted))


def image_file(image: str) -> tuple[str, str] | None:
    """A file reference's transport and path (``("oci-archive:", "/images/t.tar")``); a
    plain absolute path is apptainer's file (transport ``""``). None: a name."""
    transport = next((t for t in FILE_TRANSPORTS if image.startswith(t)), None)
    if transport is not None:
        return transport, image[len(transport) :]
    return ("", image) if image.startswith("/") else None
