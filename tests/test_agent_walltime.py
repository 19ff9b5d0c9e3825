"""How a worker learns when its batch job ends, and says so in its hello."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from fluksio.agent.walltime import detect_job_end, parse_end_time
from tests.support.worker import worker_cli


def _no_squeue(job_id: str) -> str:
    raise AssertionError(f"squeue asked for {job_id} when it should not be")


def test_an_explicit_end_wins_in_unix_or_iso_form() -> None:
    slurm = {"SLURM_JOB_ID": "41", "SLURM_JOB_END_TIME": "1"}
    assert detect_job_end(slurm, "1796123885", squeue=_no_squeue) == 1796123885.0
    iso = "2026-12-01T12:00:00+00:00"
    assert detect_job_end({}, iso, squeue=_no_squeue) == datetime.fromisoformat(iso).timestamp()


def test_in_a_slurm_job_the_end_comes_from_the_environment_or_squeue() -> None:
    assert detect_job_end({"SLURM_JOB_END_TIME": "1796123885"}, squeue=_no_squeue) == 1796123885
    asked: list[str] = []

    def squeue(job_id: str) -> str:
        asked.append(job_id)
        return "2026-12-01T11:23:05\n"

    local = datetime(2026, 12, 1, 11, 23, 5).timestamp()  # squeue prints local time
    assert detect_job_end({"SLURM_JOB_ID": "41"}, squeue=squeue) == local
    assert asked == ["41"]
    assert detect_job_end({"SLURM_JOB_ID": "41"}, squeue=lambda _j: "NONE\n") is None
    assert detect_job_end({"SLURM_JOB_ID": "41"}, squeue=lambda _j: "garbage") is None
    assert detect_job_end({}, squeue=_no_squeue) is None, "not in a job: no end"


@pytest.mark.parametrize("text", ["Unknown", "NONE", "UNLIMITED", ""])
def test_slurms_words_for_no_end_are_none(text: str) -> None:
    assert parse_end_time(text) is None


def test_a_bad_ends_at_is_a_usage_error_in_one_sentence() -> None:
    done = worker_cli(
        "--url", "ws://127.0.0.1:1/api/v1/workers/attach", "--ends-at", "tomorrow-ish"
    )
    assert done.returncode == 2
    assert "--ends-at: 'tomorrow-ish' is not a time (a Unix time, or ISO 8601)" in done.stderr


def test_slurms_year_for_a_job_without_a_limit_is_no_end() -> None:
    # sched/backfill starts an unlimited job with a 365-day limit; squeue shows that end.
    in_a_year = datetime.fromtimestamp(time.time() + 365 * 86400).strftime("%Y-%m-%dT%H:%M:%S")
    assert detect_job_end({"SLURM_JOB_ID": "270"}, squeue=lambda _j: in_a_year) is None
    in_a_week = datetime.fromtimestamp(time.time() + 7 * 86400).strftime("%Y-%m-%dT%H:%M:%S")
    assert detect_job_end({"SLURM_JOB_ID": "271"}, squeue=lambda _j: in_a_week) is not None
