"""The data directory held by one engine process: its lock, and who holds it.

Two engines on one data directory would each take the other's runs for their own, so the
first holds an exclusive ``flock`` on ``engine.lock`` for as long as its process lives,
and writes into that file who it is: its pid at once (before it opens anything), and that
it is stopping once it is. A second engine is refused with a sentence naming the pid, or,
when the holder is stopping (a graceful stop ends within :data:`STOP_WITHIN_S`), may wait
for it to let go: a restart by a service manager then simply works.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

from fluksio.engine.datadir import DataDir
from fluksio.errors import ConfigError

__all__ = ["STOP_WITHIN_S", "DataDirBusy", "data_dir_lock", "note_stopping"]

STOP_WITHIN_S = 10.0
"""A graceful stop (SIGTERM, SIGINT) ends within this long, whatever its clients do:
requests under way are answered or cut, calls in the engine's process stopped, the
provisioners' cancels given what is left; past it the engine exits all the same, its
state as after a crash, which the next engine recovers."""


class DataDirBusy(ConfigError):
    """Another engine process holds the data directory."""

    def __init__(self, message: str, *, pid: int | None, stopping: bool) -> None:
        super().__init__(message)
        self.pid = pid
        self.stopping = stopping


@contextlib.contextmanager
def data_dir_lock(layout: DataDir) -> Iterator[None]:
    """Hold the data directory for this process, or :class:`DataDirBusy` saying who
    does."""
    fd = os.open(layout.lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise _busy(layout, _holder(fd)) from exc
        _write(layout, {"pid": os.getpid(), "stopping": False})
        yield
    finally:
        os.close(fd)


def note_stopping(layout: DataDir) -> None:
    """Say in the lock that the engine holding it is stopping (it lets go soon)."""
    _write(layout, {"pid": os.getpid(), "stopping": True})


def _write(layout: DataDir, holder: dict[str, object]) -> None:
    # Through a second descriptor: the flock is the first's, on the same file.
    fd = os.open(layout.lock, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, json.dumps(holder).encode())
    finally:
        os.close(fd)


def _holder(fd: int) -> dict[str, object]:
    try:
        found = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}  # written by an engine from before the lock said who held it
    return found if isinstance(found, dict) else {}


def _busy(layout: DataDir, holder: dict[str, object]) -> DataDirBusy:
    pid = holder.get("pid")
    pid = pid if isinstance(pid, int) else None
    if pid is None:  # an engine from before the lock said who held it
        listed = (layout.read_engine_info() or {}).get("pid")
        pid = listed if isinstance(listed, int) else None
    stopping = holder.get("stopping") is True
    who = f"another engine (pid {pid if pid is not None else 'unknown'})"
    if stopping:
        said = (
            f"{who} is stopping and still holds the data directory {layout.root}; it lets"
            f" go within {STOP_WITHIN_S:g} s: start again then"
        )
    else:
        said = (
            f"{who} is already using the data directory {layout.root}; stop it or choose"
            " another --data-dir"
        )
    return DataDirBusy(said, pid=pid, stopping=stopping)
