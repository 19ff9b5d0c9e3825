"""A worker told to stop (SIGTERM: its batch job preempted, cancelled or at its end; a
service stopped) stops its running calls and tells the engine so: each runs again on
another worker as its next attempt, though its node has no retries, and nothing counts
as the node's failure or as a crash. Real engine and agent processes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.engine import start_engine
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import start_worker

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


def test_a_call_on_a_worker_told_to_stop_runs_again_elsewhere_without_a_retry(
    tmp_path: Path,
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        admin = engine.login()
        marks, gate = tmp_path / "marks", tmp_path / "gate"
        token = engine.mint(admin, "box", ["box"])["token"]
        first = start_worker(
            engine, token, tmp_path / "first", "--name", "box-1", "--labels", "box"
        )
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
        second = start_worker(
            engine, token, tmp_path / "second", "--name", "box-2", "--labels", "box"
        )
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
