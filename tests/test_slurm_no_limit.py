"""The user documentation's own example node, on its own Slurm profile, for real.

The node of ``shared/spec/`` sets a silence ``timeout`` and no ``limit``; its profile asks
Slurm for ``--time=04:00:00``. It must run there (the published system runs it), and a
node without a limit that outlives its job is stopped, its whole tree, when the job has
the margin left, and the job then ends by itself. That stop is not the node's doing: it
runs again on a new job without spending a retry (it has none), as many times as its
``max_checkpoints``; past them it fails with a sentence naming the job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.engine import free_port, start_engine, write_provisioners
from tests.support.process import alive
from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm, job_writable_folder, local_slurm, slurm_provisioner
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

MARGIN_S = 40
"""Large, so that the one-minute job's node is stopped some 15 s in, not 50."""

SPEC_NODE = {"id": "train", "worker": "gpu", "worker_policy": "require", "timeout": 7200}
"""Verbatim from the user documentation."""

TRAIN = code(
    """
    import os

    def process():
        return {"job": os.environ.get("SLURM_JOB_ID")}
    """
)

FOREVER = code(
    """
    import os, subprocess, sys, time

    def process(marks):
        child = subprocess.Popen(["sleep", "300"])
        with open(os.path.join(marks, "child.tmp"), "w") as handle:
            handle.write(str(child.pid))
        os.rename(os.path.join(marks, "child.tmp"), os.path.join(marks, "child"))
        while True:
            print("still training", flush=True)
            time.sleep(1)
    """
)


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture
def marks() -> Iterator[Path]:
    # The job runs as the cluster's unprivileged user: a directory it can write to.
    yield from job_writable_folder("fluksio-marks-")


def _provisioner(slurm: LocalSlurm, port: int) -> dict[str, Any]:
    common = {"cpus": 1, "gpus": 0, "ram_mb": 300}
    profiles = [
        # The spec's gpu-small, less what this one-node cluster does not have.
        {**common, "name": "gpu-small", "labels": ["gpu"], "sbatch": ["--time=04:00:00"]},
        # No notice: a one-minute job could not give one before the margin, and this node
        # is to be stopped at the margin, not told.
        {**common, "name": "short", "labels": ["hpc"], "sbatch": ["--time=00:01:00"]}
        | {"notice_s": 0},
    ]
    # They leave by draining, not by idling.
    return slurm_provisioner(slurm, port, max_idle_s=300, profiles=profiles)


def test_the_spec_node_runs_on_its_profile_and_a_node_past_its_job_ends_at_the_margin(
    tmp_path: Path, slurm: LocalSlurm, marks: Path
) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    write_provisioners(data_dir, [_provisioner(slurm, port)])
    margin = ("--walltime-margin-s", str(MARGIN_S))
    engine = start_engine(data_dir, tmp_path / "logs", port=port, args=margin)
    try:
        token = engine.login()
        flow_file = tmp_path / "spec.json"
        flow_file.write_text(json.dumps({"name": "spec", "nodes": [{**SPEC_NODE, "code": TRAIN}]}))
        cli_env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": token}
        saved = fluksio("flows", "put", str(flow_file), env=cli_env)
        assert saved.returncode == 0, saved.stderr
        assert saved.stderr.strip() == (
            "warning: node 'train' sets no limit, and every profile with 'gpu' brings a job"
            " that ends (hpc/gpu-small after 04:00:00, told 120 s before): it is stopped"
            ' when its job has 40 s left; give it a "limit" to be placed where it fits'
        )
        forever = [
            {
                "id": "forever",
                "worker": "hpc",
                "params": {"marks": str(marks)},
                "max_checkpoints": 1,
            }
        ]
        assert put_flow(engine, token, "forever", [{**forever[0], "code": FOREVER}])
        spec_run = start_run(engine, token, "spec")["id"]
        forever_run = start_run(engine, token, "forever")["id"]

        done = wait_run(engine, token, spec_run, timeout=90)
        assert done["state"] == "succeeded", done
        job = done["nodes"][0]["result"]["job"]
        assert done["nodes"][0]["provenance"]["batch_job"] == f"Slurm job {job}"

        ended = wait_run(engine, token, forever_run, timeout=240)
        (node,) = ended["nodes"]
        assert node["state"] == "failed" and node["error"]["type"] == "NodeLimit", node
        # Its first job's end ran it again on another job: a second attempt, no retry.
        (interrupted,) = [e for e in node["events"] if e["event"] == "interrupted"]
        first = re.search(r"Slurm job (\d+)", interrupted["outputs"]["after"])
        assert first is not None, interrupted
        assert interrupted["outputs"]["attempt"] == 2 and node["attempt"] == 2, node
        found = re.fullmatch(
            r'ran until Slurm job (\d+) \(00:01:00\) had 40 s left; give the node a "limit"'
            r" to be placed where it fits \(stopped so 2 times; its max_checkpoints is 1\)",
            node["error"]["message"],
        )
        assert found is not None, node["error"]
        short_job = found.group(1)
        assert node["provenance"]["slurm_job_id"] == short_job != first.group(1)
        # Its whole tree was stopped: the child it started is gone too.
        child = int((marks / "child").read_text())
        wait_for(lambda: not alive(child), timeout=15, what=f"the node's child {child} to end")
        # The job then ends by itself, drained, not killed at its walltime.
        state = wait_for(
            lambda: (
                slurm.job_state(short_job) not in ("RUNNING", "COMPLETING", "")
                and slurm.job_state(short_job)
            ),
            timeout=60,
            what=f"job {short_job} to end",
        )
        assert state == "COMPLETED", f"job {short_job} ended {state}"
    finally:
        engine.stop()
        slurm.cancel_leftovers(tmp_path)
