"""A call saves its state with ``fluksio.checkpoint`` and ends; it runs again, and
``fluksio.restored()`` gives the state back. No retry is spent; the node's
``max_checkpoints`` bounds how often. Real engine and agent processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.cli.runs import render_run
from fluksio.wire.answers.runs import RunBody
from tests.support.engine import EngineProcess, start_engine
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.worker import start_worker

pytestmark = pytest.mark.process

COUNTS = code("""
    import fluksio
    def process(until):
        state = fluksio.restored() or {"count": 0, "seen": []}
        state["seen"].append(state["count"])
        state["count"] += 1
        if state["count"] < until:
            try:
                fluksio.checkpoint(state)
            except Exception:  # a node's usual guard does not swallow it
                return "swallowed"
        return state
""")

NEITHER = code("""
    import fluksio
    def process():
        fluksio.checkpoint({1, 2})
""")

BYTES = code("""
    import fluksio
    def process():
        kept = fluksio.restored()
        if kept is None:
            fluksio.checkpoint(bytes(range(256)) * 4)
        return {"size": len(kept), "same": kept == bytes(range(256)) * 4}
""")


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    yield engine
    engine.stop()


def _on_worker(engine: EngineProcess, admin: str, tmp_path: Path) -> Any:
    token = engine.mint(admin, "box", ["box"])["token"]
    return start_worker(engine, token, tmp_path / "w", "--name", "box-1", "--labels", "box")


def test_a_call_that_checkpoints_runs_again_with_its_state_and_spends_no_retry(
    engine: EngineProcess, tmp_path: Path
) -> None:
    admin = engine.login()
    worker = _on_worker(engine, admin, tmp_path)
    try:
        node = {"id": "n", "worker": "box", "code": COUNTS, "params": {"until": 3}}
        run = wait_run(engine, admin, run_flow(engine, admin, "counts", [node]), timeout=60)
    finally:
        worker.stop()
    assert run["state"] == "succeeded", run
    counted = nodes_of(run)["n"]
    assert counted["result"] == {"count": 3, "seen": [0, 1, 2]}, "each attempt resumed"
    assert counted["attempt"] == 3 and counted["error"] is None
    saved = [e["outputs"] for e in counted["events"] if e["event"] == "checkpointed"]
    assert [(s["attempt"], s["of"], s["on"]) for s in saved] == [
        (2, 3, "box/box-1"),
        (3, 3, "box/box-1"),
    ]
    assert all(s["state"]["digest"].startswith("sha256:") for s in saved)
    shown = "\n".join(render_run(RunBody.model_validate(run)))
    assert "attempt 3 of 3 (attempt 2 checkpointed on box/box-1; this one resumes it)" in shown


def test_bytes_come_back_as_bytes_and_a_call_on_the_engine_checkpoints_too(
    engine: EngineProcess,
) -> None:
    admin = engine.login()
    run = wait_run(engine, admin, run_flow(engine, admin, "bytes", [{"id": "b", "code": BYTES}]))
    assert run["state"] == "succeeded", run
    assert nodes_of(run)["b"]["result"] == {"size": 1024, "same": True}
    assert nodes_of(run)["b"]["attempt"] == 2
    # A state it cannot save is the node's own error, at once.
    run = wait_run(engine, admin, run_flow(engine, admin, "set", [{"id": "s", "code": NEITHER}]))
    error = nodes_of(run)["s"]["error"]
    assert (run["state"], error["type"]) == ("failed", "TypeError"), run
    assert "the state is neither bytes nor JSON" in error["message"]


def test_past_its_max_checkpoints_a_call_fails_saying_how_often_and_the_setting(
    engine: EngineProcess, tmp_path: Path
) -> None:
    admin = engine.login()
    worker = _on_worker(engine, admin, tmp_path)
    try:
        node = {
            "id": "n",
            "worker": "box",
            "code": COUNTS,
            "params": {"until": 10},
            "max_checkpoints": 2,
            "retries": 2,  # a checkpoint is no failure: its retries are never reached
        }
        run = wait_run(engine, admin, run_flow(engine, admin, "endless", [node]), timeout=60)
    finally:
        worker.stop()
    assert run["state"] == "failed", run
    failed = nodes_of(run)["n"]
    assert failed["error"]["type"] == ErrorKind.CHECKPOINTED
    assert failed["error"]["short"] == (
        "Checkpointed: it saved its state (fluksio.checkpoint) and ended"
        " (checkpointed 3 times; its max_checkpoints is 2)"
    )
    assert failed["attempt"] == 3, "two checkpoints ran again, the third ended it"
