"""The SSH hosts provisioner's scripts on a real sshd, run by Debian's dash (the ``sh`` the
provisioner names) and by bash: a worker started and stopped leaves nothing of its session
on the host, however its processes hid from its process group.

The host is this machine (the local Slurm's login node, user ``hpcuser``), so what is left
is read from this machine's ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest

from tests.support.process import provisioned_processes
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

REMOTE_SCRIPTS = sorted(
    (
        script
        for package in (
            "fluksio.provisioners",
            "fluksio.provisioners.hosts",
            "fluksio.provisioners.slurm",
            "fluksio_gridengine",
        )
        for script in files(package).iterdir()
        if script.name.endswith(".sh")
    ),
    key=lambda p: p.name,
)


def _script(name: str) -> str:
    return (files("fluksio.provisioners.hosts") / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


def marked(request: str) -> list[int]:
    """This machine's processes carrying the request's mark."""
    found = provisioned_processes(worker_only=False)
    return [pid for pid, kept in found.items() if kept == request]


@pytest.fixture
def request_id() -> Iterator[str]:
    request = f"t{uuid.uuid4().hex[:12]}"
    yield request
    for pid in marked(request):  # what a failed test left: ours, by its mark
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("script", REMOTE_SCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_every_remote_script_is_read_by_dash_and_by_bash(
    slurm: LocalSlurm, shell: str, script: Path
) -> None:
    checked = slurm.ssh(shell, "-n", "-c", script.read_text(encoding="utf-8"))
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_stopped_worker_leaves_nothing_under_dash_or_bash(
    slurm: LocalSlurm, shell: str, request_id: str
) -> None:
    # A worker whose processes hide from its leader: one in its group, one in a session of
    # its own (as a call does).
    worker = (
        f"export FLUKSIO_PROVISION_MARK=fluksio-request={request_id}\n"
        "sleep 3917 &\n"
        "setsid sleep 3918 &\n"
        "echo started\n"
        "sleep 3919\n"
    )
    started = slurm.ssh(
        shell, "-c", _script("start.sh"), "fluksio-start", "", "", request_id, input=worker
    )
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.split()[0])
    wait_for(lambda: len(marked(request_id)) >= 3, timeout=30, what="the worker's processes")

    found = slurm.ssh(shell, "-c", _script("find.sh"), "fluksio-find")
    assert f"{request_id} {pid}" in found.stdout.splitlines(), found
    polled = slurm.ssh(shell, "-c", _script("poll.sh"), "fluksio-poll", str(pid))
    assert polled.stdout.split()[:2] == [str(pid), "running"], polled

    stopped = slurm.ssh(shell, "-c", _script("stop.sh"), "fluksio-stop", request_id, timeout=60)
    assert stopped.returncode == 0 and stopped.stderr == "", stopped.stderr
    assert marked(request_id) == [], "nothing of the worker's session is left"
    polled = slurm.ssh(shell, "-c", _script("poll.sh"), "fluksio-poll", str(pid))
    assert polled.stdout.split()[:2] == [str(pid), "gone"], polled
    listed = slurm.ssh("sh", "-c", f"ls ~/.fluksio/hosts/{request_id}.*")
    assert listed.stdout == "", "its files are removed"
