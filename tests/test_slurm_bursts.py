"""The Slurm provisioner under bursts: a real engine, real OpenSSH, a real Slurm on
127.0.0.1. A burst spreads over max_workers jobs, each call running once; an engine
restarted mid-burst finds its jobs and submits no extra; walltimes shorter than a
replacement are a cap, and no call lands past its job's end."""

from __future__ import annotations

import re
import shutil
import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.bursts import Watch, burst, shared_dir
from tests.support.engine import start_engine
from tests.support.runs import code, get_run, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import (
    no_job_outlives_its_test,
    profile_view,
    restart_engine,
    slurm,
    slurm_data_dir,
    start,
)
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


def _burst_setup(tmp_path: Path, slurm: LocalSlurm, **changes: Any) -> tuple[Path, Path, int]:
    """For a burst: a directory its jobs write to, and an engine's data directory and port
    (jobs get 120 s to attach)."""
    data_dir, port = slurm_data_dir(tmp_path, slurm, provision_timeout_s=120, **changes)
    return shared_dir(), data_dir, port


def test_a_burst_spreads_over_max_workers_jobs_and_every_call_runs_once(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    shared = shared_dir()
    ran = shared / "ran"
    engine, token = start(
        profile={"max_workers": 4, "parallel": 4}, max_idle_s=2, provision_timeout_s=120
    )
    nodes = burst(ran)
    watch = Watch(engine, token, slurm, tmp_path)
    try:
        assert put_flow(engine, token, "burst", nodes)
        watch.start()
        run_id = start_run(engine, token, "burst")["id"]
        run = wait_run(engine, token, run_id, timeout=150)
        watch.stop.set()
        watch.join(timeout=30)
        assert run["state"] == "succeeded", run
        assert sorted(ran.read_text().split()) == sorted(n["id"] for n in nodes), "each once"
        jobs_used = {n["result"] for n in run["nodes"]}
        assert 2 <= len(jobs_used) <= 4, jobs_used
        assert jobs_used <= watch.job_ids
        assert watch.most_jobs <= 4 and watch.most_pending <= 1 and watch.most_queued <= 1
    finally:
        watch.stop.set()
        shutil.rmtree(shared)


def test_max_workers_is_a_cap_with_walltimes_shorter_than_a_replacement_used_to_need(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    # One-minute jobs: each worker is near its end from the moment it attaches, and takes
    # three or four of the calls before too little of its job is left. Before, such a
    # worker stopped counting and eight calls brought six jobs at once.
    shared, data_dir, port = _burst_setup(
        tmp_path, slurm, max_idle_s=2, profile={"max_workers": 2, "sbatch": ["--time=00:01:00"]}
    )
    ran = shared / "ran"
    engine = start_engine(
        data_dir, tmp_path / "logs", port=port, args=("--walltime-margin-s", "10")
    )
    watch: Watch | None = None
    try:
        token = engine.login()
        nodes = burst(ran, 10, seconds=10, limit=15)
        assert put_flow(engine, token, "capped", nodes)
        watch = Watch(engine, token, slurm, tmp_path)
        watch.start()
        run = wait_run(engine, token, start_run(engine, token, "capped")["id"], timeout=420)
        watch.stop.set()
        watch.join(timeout=30)
        assert run["state"] == "succeeded", run
        assert sorted(ran.read_text().split()) == sorted(n["id"] for n in nodes), "each once"
        assert watch.most_jobs <= 2, f"squeue showed {watch.most_jobs} of the profile's jobs"
        assert len(watch.job_ids) >= 3, "jobs ended at their walltime and were replaced"
    finally:
        if watch is not None:
            watch.stop.set()
        engine.stop()
        shutil.rmtree(shared)
    wait_for(lambda: not slurm.fluksio_jobs(tmp_path), timeout=60, what="the last jobs to end")


def test_an_engine_restarted_mid_burst_finds_its_jobs_and_submits_no_extra(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    shared, data_dir, port = _burst_setup(
        tmp_path, slurm, max_idle_s=5, profile={"max_workers": 3, "parallel": 2}
    )
    ran, starts = shared / "ran", shared / "starts"
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        # The jobs' workers share a name (hpc-small), each on a token of its own: the calls
        # running when the engine died are each given back to the job that runs them.
        # Before, the first worker back had the others' calls requeued: some ran twice.
        assert put_flow(engine, token, "burst", burst(ran, 36, seconds=2, starts=starts))
        run_id = start_run(engine, token, "burst")["id"]
        wait_for(
            lambda: profile_view(engine, token)["jobs_by_stage"].get("attached", 0) >= 2,
            timeout=60,
            what="two jobs' workers to attach",
        )
        before = set(slurm.fluksio_jobs(tmp_path))
        assert engine.stop(signal.SIGKILL) != 0
        engine, token = restart_engine(data_dir, tmp_path, port)
        watch = Watch(engine, token, slurm, tmp_path)
        watch.start()
        run = wait_run(engine, token, run_id, timeout=150)
        watch.stop.set()
        watch.join(timeout=30)
        assert run["state"] == "succeeded", run
        each_once = sorted(f"n{i}" for i in range(36))
        assert sorted(starts.read_text().split()) == each_once, "a call started twice"
        assert sorted(ran.read_text().split()) == each_once
        assert watch.most_jobs <= 3, "no extra job beside the ones found again"
        assert len(before | watch.job_ids) <= 3, (before, watch.job_ids)
    finally:
        engine.stop()
        shutil.rmtree(shared)


def test_walltime_no_call_lands_past_its_job_end_and_the_replacement_takes_the_queue(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    data_dir, port = slurm_data_dir(
        tmp_path,
        slurm,
        max_idle_s=300,  # it leaves by draining, not by idling
        profile={"sbatch": ["--time=00:01:00"]},
    )
    engine = start_engine(
        data_dir, tmp_path / "logs", port=port, args=("--walltime-margin-s", "10")
    )
    try:
        token = engine.login()
        fits = code("""
            import os
            def process():
                return os.environ.get("SLURM_JOB_ID")
        """)
        assert put_flow(
            engine, token, "fits", [{"id": "n", "worker": "hpc", "limit": 20, "code": fits}]
        )
        too_long = [{"id": "n", "worker": "hpc", "limit": 120, "code": fits}]
        assert put_flow(engine, token, "too-long", too_long)
        first = wait_run(engine, token, start_run(engine, token, "fits")["id"], timeout=60)
        assert first["state"] == "succeeded", first
        job1 = first["nodes"][0]["result"]
        waiting = start_run(engine, token, "too-long")["id"]
        (worker,) = engine.client(token).request("GET", "/workers").body
        ends_at = datetime.fromisoformat(worker["ends_at"]).timestamp()
        assert 0 < ends_at - time.time() <= 60, worker
        reason = wait_for(
            lambda: get_run(engine, token, waiting)["reason"], timeout=10, what="a reason"
        )
        assert re.fullmatch(
            r"needs up to 120 s \(\+10 s to spare\); hpc-small's job ends in \d+ s;"
            r" the profile with 'hpc' allows at most 60 s",
            reason,
        ), reason

        # Under 30 s left, a call of 20 s (+10) no longer fits there: a replacement job
        # is asked for ahead of the end, and takes it.
        wait_for(lambda: ends_at - time.time() < 28, timeout=60, what="the job's last 28 s")
        second = wait_run(engine, token, start_run(engine, token, "fits")["id"], timeout=60)
        assert second["state"] == "succeeded", second
        job2 = second["nodes"][0]["result"]
        assert job2 != job1, "it ran on the replacement"

        # The first worker drains and leaves: its job ends by itself, not at its limit.
        state = wait_for(
            lambda: (
                slurm.job_state(job1) not in ("RUNNING", "COMPLETING", "") and slurm.job_state(job1)
            ),
            timeout=60,
            what=f"job {job1} to end",
        )
        assert state == "COMPLETED", f"job {job1} ended {state}"
        assert "drained: its job ends in" in engine.logs()
        assert get_run(engine, token, waiting)["state"] == "queued", "never placed"
    finally:
        engine.stop()
