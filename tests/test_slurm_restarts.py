"""The Slurm provisioner across restarts: a real engine, real OpenSSH, a real Slurm on
127.0.0.1. An engine crashed or restarted finds its jobs and submits no extra; a cancel a
stopping engine did not finish is finished by the next; a job that fails at start is
noticed, retried and forgiven once it works (bursts: ``test_slurm_bursts.py``)."""

from __future__ import annotations

import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import (
    start_engine,
)
from tests.support.runs import get_run, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import (
    NODE,
    log_out,
    no_job_outlives_its_test,
    profile_view,
    restart_engine,
    slurm,
    slurm_data_dir,
    start,
    wait_error,
)
from tests.support.transports import both_transports
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


def _held_jobsslurm_data_dir(tmp_path: Path, slurm: LocalSlurm, **changes: Any) -> tuple[Path, int]:
    """For engines whose jobs stay PENDING."""
    return slurm_data_dir(
        tmp_path,
        slurm,
        provision_timeout_s=0,
        profile={"sbatch": ["--begin=now+1hour"]},
        **changes,
    )


def _assert_cancelled_and_clean(slurm: LocalSlurm, job_id: str, request_id: str) -> None:
    assert slurm.job_state(job_id) == "CANCELLED"
    assert request_id not in slurm.token_files(), "the token file outlived its job"


def test_a_crashed_engine_finds_its_pending_job_again_and_submits_no_second(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    data_dir, port = _held_jobsslurm_data_dir(tmp_path, slurm)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        assert put_flow(engine, token, "held", [{"id": "n", "worker": "hpc", "code": NODE}])
        run_id = start_run(engine, token, "held")["id"]

        def pending() -> str | None:
            outstanding = profile_view(engine, token)["outstanding"]
            return outstanding["job_id"] if outstanding and outstanding["state"] else None

        job_id = wait_for(pending, timeout=30, what="the job to be PENDING")
        assert engine.stop(signal.SIGKILL) != 0  # no shutdown: nothing is cancelled
        assert slurm.fluksio_jobs(tmp_path) == [job_id]

        engine, token = restart_engine(data_dir, tmp_path, port)
        view = wait_for(
            lambda: profile_view(engine, token)["outstanding"],
            timeout=30,
            what="the restarted engine to list the job again",
        )
        assert view["job_id"] == job_id
        expected = f"provisioning hpc/small, Slurm job {job_id} PENDING (BeginTime)"
        wait_for(
            lambda: get_run(engine, token, run_id)["reason"] == expected,
            timeout=30,
            what="the recovered run to say it waits for the same job",
        )
        assert slurm.fluksio_jobs(tmp_path) == [job_id]
        assert view["request_id"] in slurm.token_files(), "the held job has not read it"
    finally:
        engine.stop()
    # Cancelled by an engine that never submitted it: the token file goes too.
    _assert_cancelled_and_clean(slurm, job_id, view["request_id"])


def test_a_job_that_ended_while_the_engine_was_down_leaves_no_stall_after_arestart_engine(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    # Before, the restarted engine still counted the dead job against max_workers, learnt
    # at its first poll that it had ended, and planned nothing: a new run stayed queued
    # ("(outstanding)") until some other event, 150 s in the audit.
    data_dir, port = slurm_data_dir(tmp_path, slurm, max_idle_s=2, provision_timeout_s=120)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        node = [{"id": "n", "worker": "hpc", "code": NODE}]
        assert put_flow(engine, token, "again", node)
        first = wait_run(engine, token, start_run(engine, token, "again")["id"], timeout=60)
        assert first["state"] == "succeeded", first
        (job_id,) = slurm.fluksio_jobs(tmp_path)
        assert engine.stop(signal.SIGKILL) != 0  # its worker idles out meanwhile
        wait_for(
            lambda: job_id not in slurm.fluksio_jobs(tmp_path), timeout=60, what="the job to end"
        )
        engine, token = restart_engine(data_dir, tmp_path, port)
        second = wait_run(engine, token, start_run(engine, token, "again")["id"], timeout=60)
        assert second["state"] == "succeeded", second
        assert second["nodes"][0]["result"]["job"] != job_id, "it ran in a new job"
    finally:
        engine.stop()
    # Its worker idles out: nothing of it is left for the next test.
    wait_for(lambda: not slurm.fluksio_jobs(tmp_path), timeout=60, what="the last job to end")


def test_a_cancel_a_stopping_engine_did_not_finish_is_finished_by_the_next_as_no_failure(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    # Before, the next engine found the job CANCELLED "before its worker attached": a failed
    # start, so the profile rested before asking again (or, had the cancel never reached
    # Slurm, it waited on a job its predecessor had given up).
    data_dir, port = _held_jobsslurm_data_dir(tmp_path, slurm, retry_base_s=600)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        assert put_flow(engine, token, "held", [{"id": "n", "worker": "hpc", "code": NODE}])
        start_run(engine, token, "held")

        def pending() -> dict[str, Any] | None:
            outstanding: dict[str, Any] | None = profile_view(engine, token)["outstanding"]
            return outstanding if outstanding and outstanding["state"] else None

        first = wait_for(pending, timeout=30, what="the job to be PENDING")
        with slurm.controller_frozen():
            # A graceful stop whose scancel waits on the frozen controller, cut short by a
            # SIGKILL (a service manager's stop timeout: docker stop gives 10 s).
            engine.process.send_signal(signal.SIGTERM)
            # Its own job's scancel, not another engine's on the shared login node (the
            # anchored pattern matches no shell that runs pgrep itself).
            ours = f"^scancel -- {first['job_id']}$"
            wait_for(
                lambda: slurm.ssh("pgrep", "-f", ours).returncode == 0,
                timeout=30,
                what="the stopping engine's scancel to wait for slurmctld",
            )
            assert engine.stop(signal.SIGKILL) != 0
        engine, token = restart_engine(data_dir, tmp_path, port)
        second = wait_for(
            lambda: (view := pending()) and view["job_id"] != first["job_id"] and view,
            timeout=60,
            what="the restarted engine to finish the cancel and ask for a new job",
        )
        view = profile_view(engine, token)
        assert (view["failures"], view["last_error"], view["retry_at"]) == (0, None, None)
        assert slurm.fluksio_jobs(tmp_path) == [second["job_id"]]
        assert '"provision.failed"' not in engine.logs()
    finally:
        engine.stop()
    _assert_cancelled_and_clean(slurm, first["job_id"], first["request_id"])


@both_transports
def test_an_engine_killed_while_sbatch_hung_finds_the_job_by_its_mark(
    tmp_path: Path, slurm: LocalSlurm, kind: str
) -> None:
    data_dir, port = _held_jobsslurm_data_dir(tmp_path, slurm, transport=kind)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        with slurm.controller_frozen():
            assert put_flow(engine, token, "held", [{"id": "n", "worker": "hpc", "code": NODE}])
            start_run(engine, token, "held")
            # sbatch runs on the login node and waits for the frozen controller.
            wait_for(
                lambda: slurm.ssh("pgrep", "-x", "sbatch").returncode == 0,
                timeout=30,
                what="sbatch to be waiting for slurmctld",
            )
            assert engine.stop(signal.SIGKILL) != 0  # the answer never comes
        # The controller takes the submission it was holding: a job no engine knows of.
        (job_id,) = wait_for(
            lambda: slurm.fluksio_jobs(tmp_path), timeout=30, what="the job to be queued"
        )

        engine, token = restart_engine(data_dir, tmp_path, port)

        def adopted() -> dict[str, Any] | None:
            outstanding: dict[str, Any] | None = profile_view(engine, token)["outstanding"]
            return outstanding if outstanding and outstanding["job_id"] else None

        view = wait_for(adopted, timeout=30, what="the restarted engine to find the job")
        assert view["job_id"] == job_id and view["answer_lost"] is None
        assert engine.logs().count('"provision.found"') == 1
        assert slurm.fluksio_jobs(tmp_path) == [job_id], "no second job"
    finally:
        engine.stop()
        log_out(data_dir)
    _assert_cancelled_and_clean(slurm, job_id, view["request_id"])


def test_a_job_that_fails_at_start_is_noticed_retried_and_forgiven_once_it_works(
    start: Any, slurm: LocalSlurm
) -> None:
    # The job fails at once until this file exists; the job user must be able to look, and
    # pytest's tmp_path is root's alone.
    shared = Path(tempfile.mkdtemp(prefix="fluksio-ready-"))
    shared.chmod(0o755)
    ready = shared / "ready"
    token_files = slurm.token_files()
    engine, token = start(
        provision_timeout_s=120,
        retry_base_s=1,
        retry_max_s=2,
        profile={"prerun": [f"test -e {ready} || exit 3"]},
    )
    try:
        assert put_flow(engine, token, "flaky", [{"id": "n", "worker": "hpc", "code": NODE}])
        run_id = start_run(engine, token, "flaky")["id"]
        error = wait_error(engine, token, "the job's failure at start")
        # Noticed at a poll, long before the 120 s provision timeout.
        assert re.fullmatch(
            r"Slurm job \d+ ended FAILED( \(\w+\))? before its worker attached", error["message"]
        ), error
        wait_for(
            lambda: profile_view(engine, token)["failures"] >= 2,
            timeout=30,
            what="a second attempt after the backoff",
        )
        ready.write_text("")
        ready.chmod(0o644)
        run = wait_run(engine, token, run_id, timeout=60)
        assert run["state"] == "succeeded", run
        view = profile_view(engine, token)
        assert view["last_error"] is None and view["failures"] == 0
        assert len(view["workers"]) == 1 and view["workers"][0]["job_id"]
        # The failed jobs never read their token files; the engine removed them.
        wait_for(
            lambda: slurm.token_files() <= token_files,
            timeout=30,
            what="the failed jobs' token files to be removed",
        )
    finally:
        shutil.rmtree(shared)
