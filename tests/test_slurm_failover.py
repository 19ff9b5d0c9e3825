"""Failover while a machine is being provisioned, on the real local Slurm: two engines of
one PostgreSQL database, the active one SIGKILLed once its job is submitted. The engine
that takes over finds the request and its job, submits no second, and the job's worker
(given both engines' URLs by ``other_engine_urls``) attaches to it and runs the call."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.engine import attach_url_on, free_port, ready
from tests.support.failover import Pair
from tests.support.postgres import LocalPostgres
from tests.support.runs import get_run, node_of, put_flow, start_run
from tests.support.slurm import LocalSlurm, requests_also_in, slurm_provisioner
from tests.support.slurm_engine import NODE, no_job_outlives_its_test, slurm
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.process, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm"]  # fixtures, used by name


def test_the_engine_taking_over_mid_provisioning_submits_no_second_job(
    tmp_path: Path, slurm: LocalSlurm, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    def requests() -> set[str]:
        with pg_cluster.connect(pg_database) as reading:
            return {str(row[0]) for row in reading.execute("SELECT id FROM provision_requests")}

    requests_also_in(tmp_path, requests)  # the jobs of these engines, for the cluster's count
    ports = (free_port(), free_port())
    # Its worker must outlast the takeover unattached: more than the tests' 2 s idle.
    entry = slurm_provisioner(
        slurm,
        ports[0],
        other_engine_urls=[attach_url_on(ports[1])],
        provision_timeout_s=120,
        max_idle_s=30,
    )
    pair = Pair.start(tmp_path, pg_cluster, pg_database, ports=ports, provisioners=[entry])
    try:
        admin = pair.first.login()
        assert put_flow(pair.first, admin, "on-hpc", [{"id": "n", "worker": "hpc", "code": NODE}])
        run_id = start_run(pair.first, admin, "on-hpc")["id"]
        submitted = wait_for(
            lambda: slurm.fluksio_jobs(tmp_path) or None, timeout=60, what="the job's sbatch"
        )
        pair.first.stop(signal.SIGKILL)
        wait_for(lambda: ready(pair.second)[0] == 200, timeout=30, what="the takeover")
        admin = pair.second.login()
        seen = set(submitted)

        def ended() -> bool:
            seen.update(slurm.fluksio_jobs(tmp_path))  # every job asked for, meanwhile too
            return bool(get_run(pair.second, admin, run_id)["state"] == "succeeded")

        wait_for(ended, timeout=120, what="the call to run on the job's worker")
        assert seen == set(submitted), f"a second sbatch: {sorted(seen)}"
        assert node_of(pair.second, admin, run_id, "n")["result"]["job"] == submitted[0]
    finally:
        pair.stop()
