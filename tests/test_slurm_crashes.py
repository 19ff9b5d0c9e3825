"""On the local Slurm: a node that kills the worker running it, on every job it gets, is
sent to a new job after each crash (it has retries), and at the engine's crash limit (3)
fails ``NodeCrashedWorkers`` naming the three workers and jobs; no fourth job is asked
for."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import no_job_outlives_its_test, slurm, start
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name

KILLS_ITS_WORKER = code(
    """
    import os, signal

    def process():
        # Up the tree to the worker (the process started with --url), and kill it.
        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\\0")
            if b"--url" in argv:
                os.kill(pid, signal.SIGKILL)
                return "killed"
            with open(f"/proc/{pid}/stat") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        return "no worker above"
    """
)


def test_a_node_that_kills_its_worker_three_times_fails_naming_each(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    engine, token = start()
    node = {"id": "n", "worker": "hpc", "code": KILLS_ITS_WORKER, "retries": 5}
    assert put_flow(engine, token, "crash", [node])
    run_id = start_run(engine, token, "crash")["id"]
    ended = wait_run(engine, token, run_id, timeout=180)
    (failed,) = ended["nodes"]
    assert failed["state"] == "failed", failed
    assert failed["error"]["type"] == "NodeCrashedWorkers", failed["error"]
    job = r"hpc-small in Slurm job (\d+)"
    found = re.fullmatch(
        rf"its worker died under it 3 times \({job}; {job}; {job}\); not sent to another"
        r" machine \(the engine's crash_limit is 3\)",
        failed["error"]["message"],
    )
    assert found is not None, failed["error"]["message"]
    assert len(set(found.groups())) == 3, "each crash on a job of its own"
    assert failed["attempt"] == 3, "two of its five retries spent, then no more"
    wait_for(
        lambda: slurm.fluksio_jobs(tmp_path) == [],
        timeout=30,
        what="no job left, and no fourth asked for",
    )
