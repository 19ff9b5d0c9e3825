"""The issue's end to end: a user who is not a superuser maps a Python function over a
hundred items from a script, against a real engine whose only capacity for them is a
Slurm profile, and reads each call's result and where it ran (the host and the job).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from fluksio.client import Client
from tests.support.cli import add_user
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import no_job_outlives_its_test, slurm, start

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


def square(x: int) -> int:
    return x * x


def test_a_user_maps_a_function_onto_a_slurm_job_and_reads_where_each_call_ran(
    start: Any, slurm: LocalSlurm
) -> None:
    engine, _admin = start()
    add_user(engine.data_dir, "ada", "ada-password-1")
    client = Client(engine.url)
    client.login("ada", "ada-password-1")
    with client.executor(worker="hpc", limit=300) as executor:
        assert list(executor.map(square, range(100), timeout=240)) == [x * x for x in range(100)]
    (summary,) = client.runs()
    (node,) = client.run(summary.id).nodes
    assert node.array is not None and node.array.counts == {"succeeded": 100}
    items = client.items(summary.id, limit=100).items
    jobs = {item.provenance.slurm_job_id for item in items if item.provenance}
    hosts = {item.provenance.host for item in items if item.provenance}
    assert len(jobs) >= 1 and None not in jobs, jobs
    assert hosts == {socket.gethostname()}
    # Real Slurm jobs of the job user's, each known to Slurm.
    assert all(slurm.job_state(str(job)) for job in jobs), jobs
