"""The Grid Engine plugin (``plugins/gridengine``) against a real cell: ``make
gridengine-up``'s qmaster and execd, reached over SSH through the local login node, as
its job user.

A call runs in a Grid Engine job whose worker reads its slots from the job; a refused
``qsub`` shows Grid Engine's own words; a job that never starts is deleted at the
provision timeout; an idle worker leaves and its job with it; a burst of calls brings no
more jobs than ``max_workers``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fluksio_gridengine import GridEngineProvisioner, GridEngineSettings

from tests.support.cli import fluksio
from tests.support.engine import (
    EngineProcess,
    ProvisionedEngines,
    attach_url_on,
    free_port,
    write_provisioners,
)
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.slurm import LocalGridEngine, local_gridengine
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

NODE = code("""
    import os, time
    def process(seconds=0):
        time.sleep(seconds)
        return {"job": os.environ.get("JOB_ID"), "slots": os.environ.get("NSLOTS"),
                "user": os.environ.get("USER") or os.getlogin()}
""")


@pytest.fixture(scope="module")
def cell() -> LocalGridEngine:
    return local_gridengine()


@pytest.fixture
def gridengine(tmp_path: Path, cell: LocalGridEngine) -> Iterator[Any]:
    engines = ProvisionedEngines(tmp_path)
    port = free_port()

    def start(profile: dict[str, Any] | None = None, **changes: Any) -> tuple[EngineProcess, str]:
        login = cell.login
        entry: dict[str, Any] = {
            "type": "gridengine",
            "name": "sge",
            "login": login.login_with_port,
            "engine_url": attach_url_on(port),
            "ssh_key": login.key,
            "known_hosts": login.known_hosts,
            "worker_command": login.worker,
            "max_idle_s": 2,
            "provision_timeout_s": 90,
            "poll_interval_s": 0.5,
            "profiles": [{"name": "small", "labels": ["sge"], "cpus": 2, "ram_mb": 2048,
                          "walltime_s": 600, **(profile or {})}],
            **changes,
        }  # fmt: skip
        return engines.start(tmp_path / "data", [entry], port)

    yield start
    engines.stop_all()
    # What a failed test left queued: its own engines' jobs only.
    left = cell.fluksio_jobs(tmp_path)
    if left:
        cell.login.ssh("qdel", *left)


def _profile_view(engine: EngineProcess, admin: str) -> dict[str, Any]:
    view = engine.client(admin).request("GET", "/workers/resources").body
    (block,) = view["provisioners"]
    assert block["type"] == "gridengine"
    (profile,) = block["profiles"]
    return dict(profile)


def test_a_call_runs_in_a_grid_engine_job_which_leaves_when_idle(
    gridengine: Any, cell: LocalGridEngine
) -> None:
    engine, admin = gridengine({"cpus": None})
    run_id = run_flow(
        engine, admin, "sge", [{"id": "n", "worker": "sge", "limit": 60, "code": NODE}]
    )
    node = nodes_of(wait_run(engine, admin, run_id, timeout=90))["n"]
    assert node["state"] == "succeeded", node
    result, provenance = node["result"], node["provenance"]
    assert result["user"] == "hpcuser" and result["job"], result
    assert provenance["provisioner"] == "sge/small", provenance
    assert provenance["batch_job"] == f"Grid Engine job {result['job']}", provenance
    (listed,) = engine.client(admin).request("GET", "/workers").body
    assert listed["batch_job"] == provenance["batch_job"], listed
    # With no cpus in its profile, the worker counts the slots its job was given.
    assert listed["inventory"]["cpus"] == int(result["slots"]) == 1, listed
    # The job's h_rt (walltime_s) is the worker's end: calls longer than what is left wait.
    ends_at = datetime.fromisoformat(listed["ends_at"]).timestamp()
    # (At most 600 s from its start; the call took at most 90 s of it.)
    assert 400 < ends_at - time.time() <= 600, listed["ends_at"]
    (worker,) = _profile_view(engine, admin)["workers"]
    assert worker["job_id"] == result["job"]
    # Idle for max_idle_s: the worker leaves, its job ends, the cell no longer lists it.
    wait_for(lambda: result["job"] not in cell.qstat_jobs(), timeout=60, what="the idle job to end")
    wait_for(
        lambda: not engine.client(admin).request("GET", "/workers").body,
        timeout=30,
        what="the worker gone from /workers",
    )


def test_a_refused_qsub_shows_grid_engines_own_words(gridengine: Any) -> None:
    engine, admin = gridengine({"queue": "nosuch.q"}, retry_base_s=300)
    run_flow(engine, admin, "sge", [{"id": "n", "worker": "sge", "limit": 60, "code": NODE}])

    def last_error() -> str | None:
        error = _profile_view(engine, admin)["last_error"]
        return error["message"] if error else None

    said = wait_for(last_error, timeout=60, what="the profile's last error")
    assert said.startswith("qsub refused the job:"), said
    assert 'job requests unknown queue "nosuch.q"' in said, said


def test_a_job_that_never_starts_is_deleted_at_the_provision_timeout(
    gridengine: Any, cell: LocalGridEngine, tmp_path: Path
) -> None:
    # A user hold: the job waits in the queue and would never start by itself.
    engine, admin = gridengine({"qsub": ["-h"]}, provision_timeout_s=4, retry_base_s=300)
    run_flow(engine, admin, "sge", [{"id": "n", "worker": "sge", "limit": 60, "code": NODE}])

    (job,) = wait_for(
        lambda: cell.fluksio_jobs(tmp_path), timeout=30, what="the held job in the queue"
    )
    wait_for(lambda: job not in cell.qstat_jobs(), timeout=30, what="the job deleted")
    said = wait_for(
        lambda: (_profile_view(engine, admin)["last_error"] or {}).get("message"),
        timeout=30,
        what="the profile's last error",
    )
    assert "did not attach within 4 s" in said, said


def test_a_burst_spreads_over_no_more_jobs_than_max_workers(
    gridengine: Any, cell: LocalGridEngine, tmp_path: Path
) -> None:
    engine, admin = gridengine({"cpus": 1, "ram_mb": 1024, "max_workers": 2}, max_idle_s=5)
    seen: set[str] = set()
    # Calls long enough that the second job's worker starts while the first has some left.
    node = {"id": "n", "worker": "sge", "limit": 60, "code": NODE.replace("seconds=0", "seconds=3")}
    runs = [run_flow(engine, admin, f"burst{i}", [node]) for i in range(5)]

    def all_ended() -> bool:
        seen.update(cell.fluksio_jobs(tmp_path))
        assert len(seen) <= 2, f"more jobs than max_workers: {sorted(seen)}"
        return all(get_run(engine, admin, r)["state"] == "succeeded" for r in runs)

    wait_for(all_ended, timeout=120, what="the burst's calls to succeed")
    jobs = {nodes_of(wait_run(engine, admin, r))["n"]["result"]["job"] for r in runs}
    assert len(jobs) == 2, f"the calls spread over both jobs: {jobs}"


def test_check_lists_the_cell_and_names_a_queue_it_does_not_have(
    tmp_path: Path, cell: LocalGridEngine
) -> None:
    login = cell.login
    profile = {"name": "two", "cpus": 2, "labels": ["sge"], "queue": cell.queue}
    entry = {
        "type": "gridengine", "name": "sge", "login": login.login_with_port,
        "engine_url": attach_url_on(free_port()), "ssh_key": login.key,
        "known_hosts": login.known_hosts, "worker_command": login.worker,
        "profiles": [profile],
    }  # fmt: skip
    write_provisioners(tmp_path / "good", [entry])
    checked = fluksio("provisioners", "check", "--ssh", "--data-dir", str(tmp_path / "good"))
    assert checked.returncode == 0, checked.stderr
    said = [line.strip() for line in checked.stdout.splitlines()]
    assert f"queues: {cell.queue}" in said and "parallel environments: smp" in said, said
    write_provisioners(
        tmp_path / "bad", [{**entry, "profiles": [{**profile, "queue": "nosuch.q"}]}]
    )
    checked = fluksio("provisioners", "check", "--ssh", "--data-dir", str(tmp_path / "bad"))
    assert checked.returncode != 0
    assert (
        f"profile 'two' asks for queue 'nosuch.q', which the cell does not have (qconf -sql"
        f" lists: {cell.queue})" in checked.stdout + checked.stderr
    ), checked


async def test_deleting_a_job_that_already_ended_succeeds_and_removes_its_token_file(
    tmp_path: Path, cell: LocalGridEngine
) -> None:
    login = cell.login
    settings = GridEngineSettings.model_validate({
        "type": "gridengine", "name": "sge", "login": login.login_with_port,
        "engine_url": attach_url_on(free_port()), "ssh_key": login.key,
        "known_hosts": login.known_hosts, "profiles": [{"name": "one", "labels": ["sge"]}],
    })  # fmt: skip
    provisioner = GridEngineProvisioner(settings)
    provisioner.state_dir = tmp_path / "state"
    token = login.ssh("sh", "-c", "mkdir -p ~/.fluksio/tokens && echo t > ~/.fluksio/tokens/gone")
    assert token.returncode == 0, token.stderr
    try:
        # A job id Grid Engine has never had (or long forgotten): qdel says it does not exist.
        await provisioner.cancel("999999", request_id="gone")
    finally:
        await provisioner.close()
    listed = login.ssh("sh", "-c", "ls ~/.fluksio/tokens/gone 2>/dev/null || echo none")
    assert listed.stdout.strip() == "none"
