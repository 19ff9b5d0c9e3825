"""Calls in containers, through the real engine, ``fluksio-worker`` and Debian's podman:
each node in the image it names, with nothing of ours inside; a node in an image no worker
allows waits with the sentence; a call that is cancelled, stopped at its limit or whose
worker dies leaves no container, process or mount."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fluksio.client import Client
from tests.support.containers import (
    BOOKWORM,
    OS_AND_PYTHON,
    TEST_IMAGES,
    TRIXIE,
    call_containers,
    need_podman,
)
from tests.support.engine import EngineProcess, start_engine
from tests.support.process import alive
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_labelled_worker

# One at a time: each test counts the containers and mounts on the machine.
pytestmark = [pytest.mark.process, pytest.mark.xdist_group("containers")]

SLEEPER = """
    import os, subprocess, sys, time
    def process():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"started {os.getpid()} {child.pid}", flush=True)
        time.sleep(600)
"""
"""A node that starts a process of its own, says so, and sleeps."""


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[EngineProcess, str, WorkerProcess]]:
    need_podman()
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    admin = engine.login()
    worker = start_labelled_worker(
        engine, admin, "box", tmp_path / "worker",
        "--containers", "podman", "--allow-image", TEST_IMAGES, "--parallel", "2",
    )  # fmt: skip
    wait_for(
        lambda: engine.client(admin).request("GET", "/workers").body,
        timeout=60,
        what=f"the worker to check podman and attach ({worker.log_path})",
    )
    yield engine, admin, worker
    worker.stop()
    engine.stop()


def test_two_nodes_in_two_images_each_run_in_its_own_on_one_worker(
    box: tuple[EngineProcess, str, WorkerProcess],
) -> None:
    engine, admin, _worker = box
    in_box = {"code": code(OS_AND_PYTHON), "worker": "box"}
    nodes = [
        {"id": "old", **in_box, "container": {"image": BOOKWORM}},
        {"id": "new", **in_box, "container": {"image": TRIXIE, "runtime": "podman"}},
    ]
    run = wait_run(engine, admin, run_flow(engine, admin, "two-images", nodes), timeout=120)
    assert run["state"] == "succeeded", run
    found = nodes_of(run)
    assert found["old"]["result"] == {"os": "bookworm", "python": "3.11"}, found["old"]
    assert found["new"]["result"] == {"os": "trixie", "python": "3.13"}, found["new"]
    # Its output came back as a call on the host's does.
    logs = engine.client(admin).request("GET", f"/runs/{run['id']}/logs?node=new").body
    assert any(line.startswith("running in 3.13") for line in logs["lines"]), logs
    # Each container goes as its call ends (removed as its runner exits, after its answer).
    wait_for(lambda: call_containers() == [], timeout=30, what="the calls' containers to go")


def test_a_node_in_an_image_no_worker_allows_waits_with_the_sentence(
    box: tuple[EngineProcess, str, WorkerProcess],
) -> None:
    engine, admin, _worker = box
    other = "registry.example/tools/cuda:12"
    node = {
        "id": "gpu",
        "code": code(OS_AND_PYTHON),
        "worker": "box",
        "container": {"image": other},
    }
    run_id = run_flow(engine, admin, "not-allowed", [node])

    def reason() -> str | None:
        said = str(nodes_of(get_run(engine, admin, run_id))["gpu"].get("reason") or "")
        return said if "no worker may run" in said else None

    said = wait_for(reason, timeout=30, what="the waiting node's reason")
    assert said.startswith(f"no worker may run image {other!r}; of those with 'box':"), said
    assert f"allows {TEST_IMAGES!r} (podman)" in said, said
    # A runtime the worker does not run waits the same way, naming it.
    asked = {"image": BOOKWORM, "runtime": "apptainer"}
    node = {"id": "gpu", "code": code(OS_AND_PYTHON), "worker": "box", "container": asked}
    other_id = run_flow(engine, admin, "other-runtime", [node])
    wait_for(
        lambda: (
            "with apptainer" in str(nodes_of(get_run(engine, admin, other_id))["gpu"].get("reason"))
        ),
        timeout=30,
        what="the reason naming the runtime",
    )
    for waiting in (run_id, other_id):
        engine.client(admin).request("POST", f"/runs/{waiting}/cancel")


def _running_call(engine: EngineProcess, admin: str, run_id: str) -> tuple[int, int, str]:
    """The container's name, and (as the host sees them) its call's pid and its child's,
    once the node said it started."""

    def started() -> tuple[int, int, str] | None:
        logs = engine.client(admin).request("GET", f"/runs/{run_id}/logs?node=sleeper").body
        lines = [line for line in logs.get("lines", []) if line.startswith("started")]
        names = call_containers()
        if not lines or len(names) != 1:
            return None
        inspected = subprocess.run(
            ["podman", "inspect", "--format", "{{.State.Pid}} {{.GraphDriver.Data.MergedDir}}",
             names[0]],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if inspected.returncode != 0:
            return None
        pid, merged = inspected.stdout.split()
        return int(pid), _host_pid_of_child(int(pid)), merged

    return wait_for(started, timeout=60, what="the call in its container to start")


def _host_pid_of_child(pid: int) -> int:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return int(children.read().split()[0])


def _nothing_left(pids: tuple[int, int], merged: str) -> bool:
    with open("/proc/self/mounts") as mounts:
        mounted = merged in mounts.read()
    return not call_containers() and not any(map(alive, pids)) and not mounted


@pytest.mark.parametrize("how", ["cancel", "limit", "worker dies"])
def test_a_stopped_call_leaves_no_container_process_or_mount(
    box: tuple[EngineProcess, str, WorkerProcess], how: str
) -> None:
    engine, admin, worker = box
    node: dict[str, Any] = {
        "id": "sleeper", "code": code(SLEEPER), "worker": "box", "container": {"image": TRIXIE},
    }  # fmt: skip
    if how == "limit":
        node["limit"] = 8  # room to see it running first, under load too
    run_id = run_flow(engine, admin, f"stopped-{how.replace(' ', '-')}", [node])
    runner, child, merged = _running_call(engine, admin, run_id)
    assert merged and alive(runner) and alive(child)
    if how == "cancel":
        engine.client(admin).request("POST", f"/runs/{run_id}/cancel?wait=30")
    elif how == "worker dies":
        os.kill(worker.pid, signal.SIGKILL)
    run = wait_run(engine, admin, run_id, timeout=60)
    error = nodes_of(run)["sleeper"]["error"] or {}
    expected = {"cancel": "NodeCancelled", "limit": "NodeLimit", "worker dies": "WorkerGone"}
    assert error.get("type") == expected[how], run
    wait_for(
        lambda: _nothing_left((runner, child), merged),
        timeout=30,
        what="no container, process or mount of the call",
    )


def test_the_executor_sends_a_function_to_an_image(
    box: tuple[EngineProcess, str, WorkerProcess],
) -> None:
    engine, admin, _worker = box
    client = Client(engine.url, token=admin)
    with client.executor(worker="box", container=TRIXIE, imports=["platform"]) as executor:
        inside = executor.submit(_where_am_i, 2).result(timeout=120)
    assert inside == {"os": "trixie", "python": "3.13", "doubled": 4}
    assert sys.version_info[:2] != (3, 13) or "trixie" not in Path("/etc/os-release").read_text()


def _where_am_i(x: int) -> dict[str, Any]:
    with open("/etc/os-release") as release:
        fields = dict(line.split("=", 1) for line in release.read().split() if "=" in line)
    return {
        "os": fields["VERSION_CODENAME"],
        "python": platform.python_version()[:4],
        "doubled": 2 * x,
    }
