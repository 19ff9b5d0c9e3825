"""A worker told to stop (SIGTERM: its batch job preempted, cancelled or at its end; a
service stopped) stops its running calls and tells the engine so: each runs again on
another worker as its next attempt, though its node has no retries, and nothing counts
as the node's failure or as a crash. Real engine and agent processes."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import EngineProcess, start_engine
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_worker

pytestmark = pytest.mark.process

HELD = code("""
    import os, time
    import fluksio
    def process(marks, gate):
        with open(marks, "a") as ledger:
            ledger.write("started\\n")
        fluksio.emit(started=True)  # the engine hears it began
        while not os.path.exists(gate):
            time.sleep(0.05)
        return "done"
""")


def _box(engine: EngineProcess, token: str, log_dir: Path, name: str, *args: str) -> WorkerProcess:
    """Our agent labelled box, named ``name``."""
    return start_worker(engine, token, log_dir, "--name", name, "--labels", "box", *args)


def test_a_call_on_a_worker_told_to_stop_runs_again_elsewhere_without_a_retry(
    tmp_path: Path,
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        admin = engine.login()
        marks, gate = tmp_path / "marks", tmp_path / "gate"
        token = engine.mint(admin, "box", ["box"])["token"]
        first = _box(engine, token, tmp_path / "first", "box-1")
        node = {"id": "n", "worker": "box", "code": HELD}
        run_id = run_flow(
            engine, admin, "held", [{**node, "params": {"marks": str(marks), "gate": str(gate)}}]
        )
        wait_for(
            lambda: nodes_of(get_run(engine, admin, run_id))["n"]["events"],
            timeout=30,
            what="the call to start, and the engine to hear it",
        )
        first.process.send_signal(signal.SIGTERM)
        assert first.process.wait(timeout=30) == 0, "it stops as asked, and says it did"

        def back_in_line() -> dict[str, object] | None:
            found: dict[str, object] = nodes_of(get_run(engine, admin, run_id))["n"]
            return found if found["state"] == "queued" else None

        queued = wait_for(back_in_line, timeout=30, what="the call to be queued again")
        (interrupted,) = [e for e in queued["events"] if e["event"] == "interrupted"]  # type: ignore[attr-defined]
        assert interrupted["outputs"]["after"] == "Interrupted: told to stop (SIGTERM)"
        assert "stopping 1 running call(s), told to the engine as interrupted" in first.logs()

        gate.touch()
        second = _box(engine, token, tmp_path / "second", "box-2")
        try:
            ended = wait_run(engine, admin, run_id, timeout=60)
        finally:
            second.stop()
        (done,) = ended["nodes"]
        assert (done["state"], done["result"], done["attempt"]) == ("succeeded", "done", 2)
        assert done["provenance"]["worker"] == "box/box-2"
        assert marks.read_text() == "started\nstarted\n", "once on each worker"
    finally:
        engine.stop()


SAVES_ON_NOTICE = code("""
    import signal, time
    import fluksio

    told = []

    def process():
        signal.signal(signal.SIGUSR1, lambda *_: told.append(True))
        fluksio.emit(started=True)  # the engine hears it began
        while not told:
            time.sleep(0.02)
        return "saved on notice"
""")


def test_a_call_that_handles_the_notice_of_its_workers_stop_returns_its_result(
    tmp_path: Path,
) -> None:
    """Told to stop, the worker first gives its calls their notice (SIGUSR1) and a grace:
    a node that handles it may save its state and return; its result counts."""
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        admin = engine.login()
        token = engine.mint(admin, "box", ["box"])["token"]
        worker = _box(engine, token, tmp_path / "w", "box-1")
        run_id = run_flow(
            engine, admin, "saves", [{"id": "n", "worker": "box", "code": SAVES_ON_NOTICE}]
        )
        wait_for(
            lambda: nodes_of(get_run(engine, admin, run_id))["n"]["events"],
            timeout=30,
            what="the call to start, and the engine to hear it",
        )
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(timeout=15) == 0
        ended = wait_run(engine, admin, run_id, timeout=30)
        (done,) = ended["nodes"]
        assert (done["state"], done["result"], done["attempt"]) == (
            "succeeded",
            "saved on notice",
            1,
        )
        assert "1 running call(s) given notice" in worker.logs()
        assert "stopping 0 running call(s)" in worker.logs(), "none left to stop"
    finally:
        engine.stop()


CHECKPOINTS_ON_NOTICE = code("""
    import signal, time
    import fluksio

    told = []

    def process():
        if fluksio.restored():
            return "went on elsewhere"
        signal.signal(signal.SIGUSR1, lambda *_: told.append(True))
        fluksio.emit(started=True)  # the engine hears it began
        while not told:
            time.sleep(0.02)
        fluksio.checkpoint({"done": 1})
""")

IGNORES_NOTICE = code("""
    import signal, time
    import fluksio

    def process():
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        fluksio.emit(started=True)
        time.sleep(600)
""")


def test_a_worker_told_to_stop_is_sent_nothing_more_and_says_it_is_stopping(
    tmp_path: Path,
) -> None:
    # Before, the call that checkpointed on its notice went back to the same worker, which
    # refused it (it takes nothing once told to stop), over and over for the 10 s its other
    # call had to end: thousands of refusals.
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        admin = engine.login()
        token = engine.mint(admin, "box", ["box"])["token"]
        first = _box(
            engine, token, tmp_path / "first", "box-1", "--parallel", "2", "--pipeline", "0"
        )
        nodes: list[dict[str, Any]] = [
            {"id": "saves", "worker": "box", "code": CHECKPOINTS_ON_NOTICE},
            {"id": "ignores", "worker": "box", "code": IGNORES_NOTICE, "max_checkpoints": 0},
        ]
        run_id = run_flow(engine, admin, "notice", nodes)
        wait_for(
            lambda: all(n["events"] for n in get_run(engine, admin, run_id)["nodes"]),
            timeout=30,
            what="both calls to start, and the engine to hear them",
        )
        first.process.send_signal(signal.SIGTERM)

        def saved_and_waiting() -> dict[str, object] | None:
            found: dict[str, object] = nodes_of(get_run(engine, admin, run_id))["saves"]
            return found if found["state"] == "queued" else None

        queued = wait_for(saved_and_waiting, timeout=30, what="the checkpointed call in line")
        (box,) = engine.client(admin).request("GET", "/workers").body
        assert (box["name"], box["status"]) == ("box/box-1", "stopping"), box
        said = str(queued["reason"])
        assert "(box/box-1: stopping)" in said and "next in line" not in said, said
        assert first.process.wait(timeout=30) == 0
        second = _box(engine, token, tmp_path / "second", "box-2")
        try:
            ended = wait_run(engine, admin, run_id, timeout=60)
        finally:
            second.stop()
        saves = nodes_of(ended)["saves"]
        assert (saves["state"], saves["result"]) == ("succeeded", "went on elsewhere"), saves
        refusals = [e for e in saves["events"] if e["event"] == "requeued"]
        assert refusals == [], f"sent back to the stopping worker {len(refusals)} times"
        assert "refused" not in first.logs()
    finally:
        engine.stop()
