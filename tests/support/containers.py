"""Podman and the test images (``scripts/container-images.sh``, run by ``make test``): what
a container test needs, and how it sees what a call left behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.ci import cannot_run

__all__ = [
    "ARCHIVE",
    "BOOKWORM",
    "TEST_IMAGES",
    "TRIXIE",
    "call_containers",
    "need_podman",
]

BOOKWORM = "localhost/fluksio-test/bookworm:1"
"""Debian 12 with python3 (3.11) and nothing else."""
TRIXIE = "localhost/fluksio-test/trixie:1"
"""Debian 13 with python3 (3.13) and nothing else."""
TEST_IMAGES = "localhost/fluksio-test/*"
"""The pattern a test worker allows."""
ARCHIVE = Path("/var/lib/fluksio-images/bookworm.oci.tar")
"""The first image as an OCI archive any user may read, for a worker to pull."""

OS_AND_PYTHON = """
    import platform
    def process():
        print(f"running in {platform.python_version()}", flush=True)
        with open("/etc/os-release") as release:
            fields = dict(line.split("=", 1) for line in release.read().split() if "=" in line)
        return {"os": fields["VERSION_CODENAME"], "python": platform.python_version()[:4]}
"""
"""A node that says, from inside, which system and Python it runs on."""


def need_podman() -> None:
    """Skip (fail under CI=true) unless podman runs and the test images are there."""
    if shutil.which("podman") is None:
        cannot_run("podman is not installed (make containers-for-tests, as root)")
    for image in (BOOKWORM, TRIXIE):
        found = subprocess.run(
            ["podman", "image", "exists", image], capture_output=True, timeout=60, check=False
        )
        if found.returncode != 0:
            cannot_run(f"{image} is not built (make containers-for-tests, as root)")
    if not ARCHIVE.is_file():
        cannot_run(f"{ARCHIVE} is missing (make containers-for-tests, as root)")


def call_containers(prefix: str = "fluksio-") -> list[str]:
    """The containers of calls (running or not) whose name starts with ``prefix``."""
    listed = subprocess.run(
        ["podman", "ps", "--all", "--filter", "label=fluksio.call", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [name for name in listed.stdout.split() if name.startswith(prefix)]
