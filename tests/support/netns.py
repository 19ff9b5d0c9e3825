"""An air gap on this machine: a network namespace joined to the root one by a veth pair.

Inside, a process sees its own loopback and one address on the pair; outside (where Slurm
runs its jobs) nothing can open a connection to what listens on the inside's loopback.
Made as root with ``ip``, removed when the test ends, however it ends. Without root (a
laptop) the tests that need it skip; under ``CI=true`` they fail: CI must not skip them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from tests.support.ci import cannot_run

__all__ = ["AirGap", "air_gap", "enter"]

_CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class AirGap:
    name: str
    outside: str
    """The root namespace's address on the pair (where the inside reaches the outside)."""
    inside: str
    """The inside's address on the pair: nothing of ours listens there."""

    def prefix(self) -> tuple[str, ...]:
        """What runs a command inside: ``ip netns exec NAME``."""
        return ("ip", "netns", "exec", self.name)


def enter(name: str) -> None:
    """Move the calling *thread* into namespace ``name``: the sockets it opens from now on
    are the inside's (other threads stay where they are)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"setns into {name}: {os.strerror(error)}")
    finally:
        os.close(fd)


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise AssertionError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


@contextlib.contextmanager
def air_gap() -> Iterator[AirGap]:
    """A fresh namespace and pair, named by this process (two suites never share one)."""
    missing = None
    if os.geteuid() != 0:
        missing = "a network namespace needs root"
    elif shutil.which("ip") is None:
        missing = "a network namespace needs iproute2's ip"
    if missing is not None:
        cannot_run(missing)
    tag = f"{os.getpid() % 100000}"
    octet = os.getpid() % 250 + 1
    gap = AirGap(f"fluksio-gap{tag}", f"10.253.{octet}.1", f"10.253.{octet}.2")
    outer, inner = f"flkgap{tag}a", f"flkgap{tag}b"
    _ip("netns", "add", gap.name)
    try:
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", gap.name)
        _ip("addr", "add", f"{gap.outside}/30", "dev", outer)
        _ip("link", "set", outer, "up")
        _ip("-n", gap.name, "addr", "add", f"{gap.inside}/30", "dev", inner)
        _ip("-n", gap.name, "link", "set", inner, "up")
        _ip("-n", gap.name, "link", "set", "lo", "up")
        yield gap
    finally:
        # Deleting the namespace deletes the inside end, and with it the pair.
        subprocess.run(["ip", "netns", "del", gap.name], timeout=30, check=False)
        subprocess.run(["ip", "link", "del", outer], capture_output=True, timeout=30, check=False)
