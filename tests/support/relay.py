"""The login node's relays as a test on that machine sees them: by their command line."""

from __future__ import annotations

import contextlib
from pathlib import Path

from fluksio.provisioners.login_route import RELAY_MARK

__all__ = ["relay_pids"]


def relay_pids(label: str) -> list[int]:
    """This machine's (the login node's) relays for ``label``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if RELAY_MARK.encode() in argv and label.encode() in argv:
                    found.append(int(entry.name))
    return found
