"""On the local Slurm, a node that counts and checkpoints on its notice finishes across
two jobs of a two-minute profile, its count carried over: told 40 s before the engine's
margin, it saves its count and ends; it is not sent back to the job that told it (the
notice would come at once), but runs on a new job, which gives the count back. No retry is
spent: the node has none."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.slurm_engine import no_job_outlives_its_test, slurm, start

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name

TICKS = 100
"""A quarter of a second each: 25 s of counting, more than one job gives before its notice
(two minutes, less the 60-s margin, less the 40-s notice)."""

COUNTS_AND_CHECKPOINTS = code(
    """
    import os, signal, time
    import fluksio

    def process(ticks):
        state = fluksio.restored() or {"count": 0, "starts": [], "jobs": []}
        state["starts"].append(state["count"])
        state["jobs"].append(os.environ.get("SLURM_JOB_ID"))
        signal.signal(signal.SIGUSR1, lambda _signal, _frame: fluksio.checkpoint(state))
        while state["count"] < ticks:
            time.sleep(0.25)
            state["count"] += 1
        return state
    """
)


def test_a_node_that_checkpoints_on_its_notice_finishes_on_a_second_job_with_its_count(
    start: Any,
) -> None:
    engine, token = start(profile={"sbatch": ["--time=00:02:00"], "notice_s": 40})
    node = {"id": "n", "worker": "hpc", "code": COUNTS_AND_CHECKPOINTS, "params": {"ticks": TICKS}}
    assert put_flow(engine, token, "counts", [node])
    run = wait_run(engine, token, start_run(engine, token, "counts")["id"], timeout=300)
    (done,) = run["nodes"]
    assert done["state"] == "succeeded", done.get("events")
    state = done["result"]
    assert state["count"] == TICKS, "every tick counted once, across its jobs"
    jobs, starts = state["jobs"], state["starts"]
    assert len(jobs) >= 2 and len(set(jobs)) == len(jobs), f"a new job each time: {jobs}"
    assert starts[0] == 0 and all(a < b for a, b in itertools.pairwise(starts)), (
        f"each job went on from the count the last saved: {starts}"
    )
    assert done["attempt"] == len(jobs) and done["error"] is None, "no retry was spent"
    assert done["provenance"]["slurm_job_id"] == jobs[-1]
    saved = [e["outputs"] for e in done["events"] if e["event"] == "checkpointed"]
    assert [s["on"] for s in saved] == [f"hpc-small in Slurm job {job}" for job in jobs[:-1]]
