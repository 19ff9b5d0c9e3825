"""A queued Slurm job that no waiting call needs any more leaves the site's queue within
seconds, not at the provision timeout, and its end counts as no failure of the profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import get_run, put_flow, start_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import NODE, no_job_outlives_its_test, profile_view, slurm, start
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


def test_a_cancelled_runs_queued_job_leaves_the_queue_within_10_s(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    # Held for an hour (BeginTime), and no provision timeout: only the new rule ends it.
    engine, token = start(provision_timeout_s=0, profile={"sbatch": ["--begin=now+1hour"]})
    assert put_flow(engine, token, "later", [{"id": "n", "worker": "hpc", "code": NODE}])
    run_id = start_run(engine, token, "later")["id"]

    def pending() -> dict[str, Any] | None:
        outstanding = profile_view(engine, token)["outstanding"]
        return outstanding if outstanding and outstanding["state"] == "PENDING" else None

    job_id = wait_for(pending, timeout=30, what="the job to be PENDING")["job_id"]
    assert slurm.fluksio_jobs(tmp_path) == [job_id]

    cancelled = engine.client(token).request("POST", f"/runs/{run_id}/cancel")
    assert cancelled.status == 200 and get_run(engine, token, run_id)["state"] == "cancelled"
    wait_for(
        lambda: slurm.fluksio_jobs(tmp_path) == [],
        timeout=10,
        what=f"job {job_id}, which nothing waits for, to leave the queue",
    )
    assert slurm.job_state(job_id) == "CANCELLED"

    def settled() -> dict[str, Any] | None:
        view: dict[str, Any] = profile_view(engine, token)
        return view if view["outstanding"] is None else None

    view = wait_for(settled, timeout=30, what="the profile to have nothing outstanding")
    # Withdrawn, not failed: no back-off, no error, and the next need submits at once.
    assert view["retry_at"] is None and view["last_error"] is None, view
