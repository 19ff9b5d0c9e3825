"""On the local Slurm, failures counted by their cause: a node that kills the worker
running it, on every job it gets, is sent to a new job after each crash (it has retries),
and at the engine's crash limit (3) fails ``NodeCrashedWorkers`` naming the three workers
and jobs, no fourth job asked for; a call whose job is cancelled under it (``scancel``:
SIGTERM, as a preemption) runs again on a new job though its node has no retries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.runs import code, get_run, nodes_of, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm, job_writable_folder
from tests.support.slurm_engine import no_job_outlives_its_test, slurm, start
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name

KILLS_ITS_WORKER = code(
    """
    import os, signal

    def process():
        # Up the tree to the worker (the process started with --url), and kill it.
        pid = os.getppid()
        while pid > 1:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\\0")
            if b"--url" in argv:
                os.kill(pid, signal.SIGKILL)
                return "killed"
            with open(f"/proc/{pid}/stat") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        return "no worker above"
    """
)


def test_a_node_that_kills_its_worker_three_times_fails_naming_each(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    engine, token = start()
    node = {"id": "n", "worker": "hpc", "code": KILLS_ITS_WORKER, "retries": 5}
    assert put_flow(engine, token, "crash", [node])
    run_id = start_run(engine, token, "crash")["id"]
    ended = wait_run(engine, token, run_id, timeout=180)
    (failed,) = ended["nodes"]
    assert failed["state"] == "failed", failed
    assert failed["error"]["type"] == "NodeCrashedWorkers", failed["error"]
    job = r"hpc-small in Slurm job (\d+)"
    found = re.fullmatch(
        rf"its worker died under it 3 times \({job}; {job}; {job}\); not sent to another"
        r" machine \(the engine's crash_limit is 3\)",
        failed["error"]["message"],
    )
    assert found is not None, failed["error"]["message"]
    assert len(set(found.groups())) == 3, "each crash on a job of its own"
    assert failed["attempt"] == 3, "two of its five retries spent, then no more"
    wait_for(
        lambda: slurm.fluksio_jobs(tmp_path) == [],
        timeout=30,
        what="no job left, and no fourth asked for",
    )


HELD = code(
    """
    import os, time
    import fluksio

    def process(marks, gate):
        with open(marks, "a") as ledger:
            ledger.write(os.environ["SLURM_JOB_ID"] + "\\n")
        fluksio.emit(started=True)  # the engine hears it began
        while not os.path.exists(gate):
            time.sleep(0.1)
        return os.environ["SLURM_JOB_ID"]
    """
)


@pytest.fixture
def shared() -> Iterator[Path]:
    yield from job_writable_folder("fluksio-held-")


def test_a_call_whose_job_is_cancelled_runs_again_on_a_new_job_without_a_retry(
    start: Any, slurm: LocalSlurm, tmp_path: Path, shared: Path
) -> None:
    engine, token = start()
    marks, gate = shared / "marks", shared / "gate"
    params = {"marks": str(marks), "gate": str(gate)}
    assert put_flow(
        engine, token, "held", [{"id": "n", "worker": "hpc", "code": HELD, "params": params}]
    )
    run_id = start_run(engine, token, "held")["id"]
    wait_for(
        lambda: nodes_of(get_run(engine, token, run_id))["n"]["events"],
        timeout=60,
        what="the call to start in its job, and the engine to hear it",
    )
    (first_job,) = marks.read_text().split()
    cancelled = slurm.ssh("scancel", first_job)
    assert cancelled.returncode == 0, cancelled.stderr

    def back_in_line() -> dict[str, Any] | None:
        found: dict[str, Any] = nodes_of(get_run(engine, token, run_id))["n"]
        return found if any(e["event"] == "interrupted" for e in found["events"]) else None

    wait_for(back_in_line, timeout=60, what="the call to be queued again as interrupted")
    gate.touch()
    ended = wait_run(engine, token, run_id, timeout=120)
    (done,) = ended["nodes"]
    assert done["state"] == "succeeded", done
    assert done["attempt"] == 2 and done["result"] != first_job, done
    assert marks.read_text().split() == [first_job, done["result"]]


NOTICED = code(
    """
    import os, signal, time
    import fluksio

    told = []

    def process():
        signal.signal(signal.SIGUSR1, lambda *_: told.append(fluksio.time_left()))
        while not told:
            time.sleep(0.1)
        return {"job": os.environ["SLURM_JOB_ID"], "time_left": told[0]}
    """
)


def test_a_call_running_until_its_jobs_end_is_told_before_it_is_stopped(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    """Its profile's ``notice_s`` (40) before the engine's margin (60 s) of its two-minute
    job: the node hears SIGUSR1, reads how long it has, and returns in time."""
    engine, token = start(profile={"sbatch": ["--time=00:02:00"], "notice_s": 40})
    assert put_flow(engine, token, "told", [{"id": "n", "worker": "hpc", "code": NOTICED}])
    run_id = start_run(engine, token, "told")["id"]
    ended = wait_run(engine, token, run_id, timeout=120)
    (done,) = ended["nodes"]
    assert done["state"] == "succeeded", done
    assert done["result"]["job"] == done["provenance"]["slurm_job_id"]
    assert 0 < done["result"]["time_left"] <= 40, done["result"]
