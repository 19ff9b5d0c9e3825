"""The site's own limits on the real Slurm's accounting (slurmdbd): a QOS of this test's
own, made and removed here, that allows two jobs per user and three minutes each. The
cluster does not enforce it (no other test is refused for it): the engine keeps to it
because it read it, and says so where a user looks: ``check --ssh``, ``GET
/workers/resources`` and the waiting call's reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.bursts import Watch, burst, shared_dir
from tests.support.ci import cannot_run
from tests.support.runs import put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import (
    check_ssh,
    no_job_outlives_its_test,
    profile_view,
    resources_of,
    short_partition,
    slurm,
    start,
)
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


@pytest.fixture
def qos(slurm: LocalSlurm) -> Iterator[str]:
    name = f"fluksio-two-{os.getpid()}"
    limits = ["MaxSubmitJobsPerUser=2", "MaxWall=00:03:00"]
    made = _sacctmgr("add", "qos", name, *limits)
    if made.returncode != 0:
        message = (
            f"no Slurm accounting to make a QOS in ({made.stderr.strip()}): run `make slurm-up`"
        )
        cannot_run(message)
    yield name
    _sacctmgr("delete", "qos", name)


def _sacctmgr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_check_ssh_shows_what_a_qos_allows_and_names_a_profile_past_its_max_wall(
    slurm: LocalSlurm, tmp_path: Path, qos: str
) -> None:
    common = {"cpus": 1, "ram_mb": 300, "labels": ["hpc"]}
    fits = {**common, "name": "fits", "sbatch": [f"--qos={qos}", "--time=00:02:00"]}
    long = {**common, "name": "long", "sbatch": [f"--qos={qos}", "--time=00:10:00"]}
    done = check_ssh(slurm, tmp_path, profiles=[fits])
    assert done.returncode == 0, done.stderr
    assert (
        f"profile 'fits': at most 2 jobs at once: QOS '{qos}' allows 2 jobs per user"
        " (MaxSubmitJobsPerUser)"
    ) in done.stdout
    done = check_ssh(slurm, tmp_path, profiles=[fits, long])
    assert done.returncode == 2, done.stdout
    assert (
        f"profile 'long' asks for jobs of 00:10:00, longer than QOS '{qos}' allows"
        " (MaxWall 00:03:00); ask for less, or name another QOS or account"
    ) in done.stderr


def test_a_profile_never_has_more_jobs_than_its_qos_allows_and_a_waiting_call_says_so(
    start: Any, slurm: LocalSlurm, tmp_path: Path, qos: str
) -> None:
    # max_workers 4 and six calls of 4 s, one at a time on each worker: without the QOS's
    # limit the engine brings four jobs.
    shared = shared_dir()
    profile = {"max_workers": 4, "parallel": 1, "sbatch": [f"--qos={qos}", "--time=00:03:00"]}
    engine, token = start(profile=profile, max_idle_s=2, provision_timeout_s=120)
    watch = Watch(engine, token, slurm, tmp_path)
    try:
        # A limit: a call without one would wait for a job longer than the QOS allows.
        calls = burst(shared / "ran", 6, seconds=4, limit=30)
        assert put_flow(engine, token, "limited", calls)
        watch.start()
        run = wait_run(engine, token, start_run(engine, token, "limited")["id"], timeout=240)
        watch.stop.set()
        watch.join(timeout=30)
        assert run["state"] == "succeeded", run
        assert len((shared / "ran").read_text().split()) == 6
        assert watch.most_jobs == 2, f"squeue showed at most {watch.most_jobs} of our jobs"
        said = f"QOS '{qos}' allows 2 jobs per user (MaxSubmitJobsPerUser)"
        assert profile_view(engine, token)["site_limit"] == f"at most 2 jobs at once: {said}"
        assert any(f"the site's limit reached ({said})" in r for r in watch.reasons), sorted(
            watch.reasons
        )
    finally:
        watch.stop.set()
        shutil.rmtree(shared)


def test_a_profile_past_its_partitions_time_limit_is_never_submitted_and_says_why(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    # A partition of this test's own, with a two-minute limit; the profile asks for five.
    # Before, each submission was refused (EnforcePartLimits) until the profile paused.
    with short_partition() as partition:
        sbatch = [f"--partition={partition}", "--time=00:05:00"]
        engine, token = start(profile={"sbatch": sbatch})
        node = {"id": "n", "worker": "hpc", "code": "def process():\n    return 1\n"}
        assert put_flow(engine, token, "too-long", [node])
        start_run(engine, token, "too-long")
        said = (
            f"profile 'small' asks for jobs of 00:05:00, longer than partition '{partition}'"
            " (00:02:00) allows; ask for less, or name another partition"
        )
        wait_for(
            lambda: (
                [c["reason"] for c in resources_of(engine, token)["queued"]]
                == [f"provisioning hpc/small, the site would not run its jobs: {said}"]
            ),
            timeout=30,
            what="the call to say its profile's partition would not run it",
        )
        view = profile_view(engine, token)
        assert (view["site_limit"], view["jobs"], view["last_error"]) == (said, [], None)
        assert slurm.fluksio_jobs(tmp_path) == [], "nothing was submitted"
