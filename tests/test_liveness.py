"""The spec's 90-second rule, at its real length, with real agent processes: the contract.

"90 seconds without contact fails the call": a worker frozen mid-call (SIGSTOP) fails its
call between 85 and 100 s, saying so, and not at 45 s as a WebSocket ping timeout would;
a worker stopped for 60 s and then continued loses nothing: its call finishes with its
result. Both run side by side on one engine, so the contract costs one wait of ~95 s.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engine import EngineProcess, start_engine
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_worker

NODE = code("""
    import time
    def process():
        time.sleep(70)
        return "slept through"
""")


@pytest.fixture
def engine_and_workers(tmp_path: Path) -> Iterator[tuple[EngineProcess, list[WorkerProcess]]]:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")  # the default: 90 s
    workers: list[WorkerProcess] = []
    yield engine, workers
    for worker in workers:
        worker.process.send_signal(signal.SIGCONT)
        worker.stop()
    engine.stop()


def test_frozen_fails_between_85_and_100_s_and_a_60_s_stop_loses_nothing(
    engine_and_workers: tuple[EngineProcess, list[WorkerProcess]], tmp_path: Path
) -> None:
    engine, workers = engine_and_workers
    admin = engine.login()
    runs: dict[str, str] = {}
    for name in ("frozen", "paused"):
        token = engine.mint(admin, name, [name])["token"]
        workers.append(start_worker(engine, token, tmp_path / name, "--labels", name))
        runs[name] = run_flow(engine, admin, name, [{"id": "n", "worker": name, "code": NODE}])
    for name, run_id in runs.items():
        wait_for(
            lambda run_id=run_id: (
                nodes_of(get_run(engine, admin, run_id))["n"]["state"] == "running"
            ),
            timeout=30,
            what=f"the {name} worker's call to start",
        )
    paused = workers[1]
    stopped_at = time.monotonic()
    for worker in workers:
        worker.process.send_signal(signal.SIGSTOP)

    # Past the old ping timeout (45 s) both calls still run.
    wait_for(lambda: time.monotonic() - stopped_at > 60, timeout=65, what="60 s", interval=1)
    for run_id in runs.values():
        assert nodes_of(get_run(engine, admin, run_id))["n"]["state"] == "running"
    paused.process.send_signal(signal.SIGCONT)

    gone = nodes_of(wait_run(engine, admin, runs["frozen"], timeout=60))["n"]
    took = time.monotonic() - stopped_at
    assert 85 <= took <= 100, took
    assert gone["state"] == "failed" and gone["error"]["type"] == "WorkerGone"
    assert "no message from the worker for 90 s" in gone["error"]["message"]

    finished = nodes_of(wait_run(engine, admin, runs["paused"], timeout=30))["n"]
    assert (finished["state"], finished["result"]) == ("succeeded", "slept through")
