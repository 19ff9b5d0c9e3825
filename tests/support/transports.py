"""Both SSH transports, built alike, so one test holds both to the same behaviour."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fluksio.ssh import TRANSPORTS, AsyncsshTransport, OpenSSHTransport

__all__ = ["TRANSPORTS", "both_transports", "make_transport"]

both_transports = pytest.mark.parametrize("kind", TRANSPORTS)
"""Runs the test once per transport, with ``kind`` its name."""


def make_transport(
    kind: str, login: str, key: str | None = None, *, shared: Path, **options: Any
) -> AsyncsshTransport | OpenSSHTransport:
    """``kind``'s transport; OpenSSH shares its connection through a socket at ``shared``."""
    if kind == "openssh":
        return OpenSSHTransport(login, key, control_path=shared, **options)
    return AsyncsshTransport(login, key, **options)
