"""Machines you own (``"type": "ssh"``), against a real sshd: the local Slurm's login node,
whose user ``hpcuser`` stands for a GPU box's owner.

A call that needs the host's label starts a worker there over SSH, detached; it runs the
call and leaves when idle, leaving nothing; an engine killed and restarted adopts the
running worker instead of starting a second, and a stopping engine stops it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.engine import (
    EngineProcess,
    ProvisionedEngines,
    attach_url_on,
    free_port,
)
from tests.support.process import parent_of
from tests.support.process import provisioned_processes as host_workers
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

NODE = code("""
    import os
    def process():
        return {"pid": os.getppid(), "user": os.environ.get("USER") or os.getlogin()}
""")


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture
def boxes(tmp_path: Path, slurm: LocalSlurm) -> Iterator[Any]:
    engines = ProvisionedEngines(tmp_path)
    port = free_port()

    def start(**changes: Any) -> tuple[EngineProcess, str]:
        host = {"name": "box", "login": slurm.login_with_port, "labels": ["box"], "cpus": 1}
        entry: dict[str, Any] = {
            "type": "ssh",
            "name": "boxes",
            "engine_url": attach_url_on(port),
            "ssh_key": slurm.key,
            "known_hosts": slurm.known_hosts,
            "worker_command": slurm.worker,
            "max_idle_s": 2,
            "provision_timeout_s": 60,
            "poll_interval_s": 0.3,
            "hosts": [host],
            **changes,
        }
        return engines.start(tmp_path / "data", [entry], port)

    before = set(host_workers(worker_only=False))
    yield start
    engines.stop_all()
    for pid in set(host_workers(worker_only=False)) - before:  # a failed test's: by pid
        with contextlib.suppress(ProcessLookupError):
            __import__("os").kill(pid, signal.SIGKILL)


def test_a_call_starts_a_worker_on_the_host_which_runs_it_and_leaves_nothing_when_idle(
    boxes: Any, slurm: LocalSlurm
) -> None:
    engine, admin = boxes()
    run_id = run_flow(engine, admin, "box", [{"id": "n", "worker": "box", "code": NODE}])
    run = wait_run(engine, admin, run_id, timeout=60)
    node = nodes_of(run)["n"]
    assert run["state"] == "succeeded", node
    assert node["ran_on"] == "boxes-box" and node["result"]["user"] == "hpcuser"
    assert node["provenance"]["provisioner"] == "boxes/box"
    ((worker, request),) = host_workers().items()
    assert worker == node["result"]["pid"] or worker in _ancestors(node["result"]["pid"])
    assert node["provenance"]["batch_job"] == f"worker box:{worker}", node["provenance"]
    # Idle for max_idle_s: it leaves, and the host keeps nothing of it.
    wait_for(lambda: not host_workers(), timeout=30, what="the idle worker to leave")

    def kept() -> str:
        listed = slurm.ssh(
            "sh", "-c", f"ls ~/.fluksio/hosts/{request}.* ~/.fluksio/tokens/{request}"
        )
        return listed.stdout.strip()

    wait_for(lambda: not kept(), timeout=30, what="the host's files of it removed")
    checked = fluksio("provisioners", "check", "--ssh", "--data-dir", str(engine.data_dir))
    assert checked.returncode == 0, checked.stderr
    said = [line.strip() for line in checked.stdout.splitlines()]
    at = said.index("boxes: access works")
    assert said[at + 1 : at + 3] == ["box:", "transport: asyncssh"], said
    assert f"connects to: {slurm.login_with_port}" in said, said


def _ancestors(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError, ValueError):
        while pid > 1:
            pid = parent_of(pid)
            found.append(pid)
    return found


def test_a_killed_engine_adopts_the_running_worker_and_a_stopping_one_stops_it(
    boxes: Any,
) -> None:
    engine, admin = boxes(max_idle_s=120)
    run_id = run_flow(engine, admin, "box", [{"id": "n", "worker": "box", "code": NODE}])
    assert wait_run(engine, admin, run_id, timeout=60)["state"] == "succeeded"
    ((worker, request),) = host_workers().items()
    engine.stop(signal.SIGKILL)
    engine, admin = boxes(max_idle_s=120)  # the same data directory and port
    run_id = run_flow(engine, admin, "box", [{"id": "n", "worker": "box", "code": NODE}])
    assert wait_run(engine, admin, run_id, timeout=60)["state"] == "succeeded"
    assert host_workers() == {worker: request}, "adopted: the same worker, no second"
    engine.stop()
    wait_for(lambda: not host_workers(), timeout=30, what="the worker stopped with the engine")


def test_the_smallest_host_that_can_start_one_is_chosen_and_a_host_that_refuses_is_skipped(
    boxes: Any, slurm: LocalSlurm
) -> None:
    assert slurm.box_login, "make slurm-up brings a second machine up"
    slow = NODE.replace("def process():", "import time\ndef process():\n    time.sleep(3)")
    hosts = [
        # The smallest: its sshd is down (nothing listens on its port).
        {"name": "tiny", "login": f"hpcuser@127.0.0.1:{free_port()}", "labels": ["box"],
         "cpus": 1, "ram_mb": 100},
        {"name": "small", "login": slurm.box_login, "labels": ["box"], "cpus": 1, "ram_mb": 200},
        {"name": "big", "login": slurm.login_with_port, "labels": ["box"], "cpus": 2},
    ]  # fmt: skip
    engine, admin = boxes(hosts=hosts, max_idle_s=30, retry_base_s=300)
    first = run_flow(engine, admin, "one", [{"id": "n", "worker": "box", "code": slow}])
    node = nodes_of(wait_run(engine, admin, first, timeout=90))["n"]
    assert (node["state"], node["ran_on"]) == ("succeeded", "boxes-small"), node
    assert node["result"]["user"] == "boxuser"
    view = engine.client(admin).request("GET", "/workers/resources").body
    (block,) = view["provisioners"]
    tiny = {p["name"]: p for p in block["profiles"]}["tiny"]
    assert "cannot reach" in tiny["last_error"]["message"], tiny["last_error"]
    # Two at once: small runs one, and the next host that fits starts for the other.
    runs = [
        run_flow(engine, admin, f"two{i}", [{"id": "n", "worker": "box", "code": slow}])
        for i in range(2)
    ]
    ran_on = {nodes_of(wait_run(engine, admin, r, timeout=90))["n"]["ran_on"] for r in runs}
    assert ran_on == {"boxes-small", "boxes-big"}


def test_a_worker_that_never_attaches_is_stopped_at_the_provision_timeout(
    boxes: Any, slurm: LocalSlurm
) -> None:
    # Its engine_url names a port nothing listens on: the worker runs, retrying, and never
    # attaches; the provision timeout stops it on its host.
    nowhere = attach_url_on(free_port())
    engine, admin = boxes(
        engine_url=nowhere, provision_timeout_s=4, retry_base_s=300, max_idle_s=120
    )
    run_flow(engine, admin, "box", [{"id": "n", "worker": "box", "code": NODE}])
    ((_pid, request),) = wait_for(host_workers, timeout=30, what="a worker on the host").items()
    wait_for(lambda: not host_workers(), timeout=30, what="the worker stopped at the timeout")

    def last_error() -> str | None:
        view = engine.client(admin).request("GET", "/workers/resources").body
        (profile,) = view["provisioners"][0]["profiles"]
        return profile["last_error"]["message"] if profile["last_error"] else None

    said = wait_for(last_error, timeout=30, what="the profile's last error")
    # The timeout's own sentence, or (a poll under way as it was stopped) its end's.
    assert "did not attach within 4 s" in said or "before its worker attached" in said, said
    listed = slurm.ssh("sh", "-c", f"ls ~/.fluksio/hosts/{request}.* ~/.fluksio/tokens/{request}")
    assert listed.stdout == "", "nothing of it is left on the host"


def test_a_start_hung_in_its_prerun_leaves_no_process_on_the_host(
    boxes: Any, slurm: LocalSlurm
) -> None:
    # The case: a prerun that never returns, stopped at the provision timeout by
    # Debian's sh (dash), used to leave its sleep running after the engine stopped.
    engine, admin = boxes(
        hosts=[
            {
                "name": "box",
                "login": slurm.login_with_port,
                "labels": ["box"],
                "cpus": 1,
                "prerun": ["sleep 3917"],
            }
        ],
        provision_timeout_s=4,
        retry_base_s=300,
    )
    run_flow(engine, admin, "box", [{"id": "n", "worker": "box", "code": NODE}])

    def sleeping() -> list[int]:
        """The prerun's sleep, found by its command line (as ps shows it), not its mark."""
        found = []
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if (entry / "cmdline").read_bytes() == b"sleep\x003917\x00":
                    found.append(int(entry.name))
        return found

    ours = wait_for(sleeping, timeout=30, what="the prerun's sleep on the host")
    wait_for(lambda: not set(ours) & set(sleeping()), timeout=30, what="the sleep stopped")
    engine.stop()
    assert sleeping() == [] and host_workers(worker_only=False) == {}, "nothing is left"
