"""No process outlives its call: however the agent or engine dies, a call's whole tree dies.

The node starts a child that backgrounds a grandchild (``sh -c 'sleep 300 & ...'``) and a
process that leaves the call's process group with ``setsid``. Then its agent is SIGKILLed
or SIGTERMed (fork server and spawn modes), or the engine running it itself is SIGKILLed;
every one of those processes must be gone within 5 s (a SIGTERMed agent first gives its
calls their notice and a 10-s grace). And while agent and engine live, a
call that returns or is cancelled leaves nothing either: not a ``setsid sleep``, not a
``nohup sleep &``, not a double fork. Real processes throughout.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from fluksio.agent.session import NOTICE_GRACE_S
from tests.support.engine import EngineProcess, start_engine
from tests.support.escapees import ESCAPEES, ESCAPING
from tests.support.process import alive
from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_worker

pytestmark = pytest.mark.process

TREE = code("""
    import os, subprocess, time

    def process(marks):
        child = subprocess.Popen(
            ["sh", "-c", f"sleep 300 & echo $! > {marks}/grandchild.tmp;"
                         f" mv {marks}/grandchild.tmp {marks}/grandchild; wait"])
        escaped = subprocess.Popen(["setsid", "sleep", "300"])
        for name, pid in (("child", child.pid), ("escaped", escaped.pid),
                          ("call", os.getpid())):
            with open(f"{marks}/{name}.tmp", "w") as handle:
                handle.write(str(pid))
            os.rename(f"{marks}/{name}.tmp", f"{marks}/{name}")
        time.sleep(300)
""")
PIDS = ("call", "child", "grandchild", "escaped")


def _start_tree(engine: EngineProcess, marks: Path, worker: str | None) -> dict[str, int]:
    admin = engine.login()
    node = {"id": "tree", "code": TREE, **({"worker": worker} if worker else {})}
    assert put_flow(engine, admin, "tree", [node]).status == 201
    start_run(engine, admin, "tree", marks=str(marks))
    wait_for(
        lambda: all((marks / name).exists() for name in PIDS),
        timeout=30,
        what="the node's whole tree to start",
    )
    pids = {name: int((marks / name).read_text()) for name in PIDS}
    assert all(alive(pid) for pid in pids.values())
    return pids


def _all_gone_within_5_s(pids: dict[str, int], since: float, grace: float = 0.0) -> None:
    """Every process of the call gone within 5 s (after ``grace``, a notice's)."""
    try:
        wait_for(
            lambda: not any(alive(p) for p in pids.values()),
            timeout=10 + grace,
            what="the tree to die",
        )
    except AssertionError:
        left = {name: pid for name, pid in pids.items() if alive(pid)}
        raise AssertionError(f"still alive after {10 + grace:g} s: {left}") from None
    assert time.monotonic() - since <= 5 + grace, "every process of the call is gone"


@pytest.mark.parametrize(
    ("how", "mode"),
    [(signal.SIGKILL, "fork"), (signal.SIGTERM, "fork"), (signal.SIGKILL, "spawn")],
    ids=["agent-killed-fork", "agent-terminated-fork", "agent-killed-spawn"],
)
def test_a_dying_agent_takes_every_process_of_its_calls_along(
    tmp_path: Path, how: signal.Signals, mode: str
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    worker: WorkerProcess | None = None
    try:
        token = engine.mint(engine.login(), "box", ["box"])["token"]
        worker = start_worker(
            engine, token, tmp_path / "w", "--labels", "box", "--runner-mode", mode
        )
        marks = tmp_path / "marks"
        marks.mkdir()
        pids = _start_tree(engine, marks, "box")
        worker.process.send_signal(how)
        # Told to stop (SIGTERM), the agent gives its calls their notice and its grace.
        grace = NOTICE_GRACE_S if how is signal.SIGTERM else 0.0
        _all_gone_within_5_s(pids, time.monotonic(), grace)
    finally:
        if worker is not None:
            worker.stop()
        engine.stop()


def test_a_killed_engine_takes_every_process_of_its_own_calls_along(tmp_path: Path) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        marks = tmp_path / "marks"
        marks.mkdir()
        pids = _start_tree(engine, marks, None)
        engine.process.send_signal(signal.SIGKILL)
        _all_gone_within_5_s(pids, time.monotonic())
    finally:
        engine.stop()


@pytest.mark.parametrize(
    ("where", "then"),
    [("worker", "return"), ("worker", "cancel"), ("engine", "return"), ("engine", "cancel")],
)
def test_no_process_outlives_a_call_that_returned_or_was_cancelled(
    tmp_path: Path, where: str, then: str
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    worker: WorkerProcess | None = None
    try:
        admin = engine.login()
        node: dict[str, object] = {"id": "escaping", "code": ESCAPING}
        if where == "worker":
            token = engine.mint(admin, "box", ["box"])["token"]
            worker = start_worker(engine, token, tmp_path / "w", "--labels", "box")
            node["worker"] = "box"
        marks = tmp_path / "marks"
        marks.mkdir()
        assert put_flow(engine, admin, "escaping", [node]).status == 201
        run = start_run(engine, admin, "escaping", marks=str(marks), then=then)
        wait_for(
            lambda: all((marks / name).exists() for name in ESCAPEES),
            timeout=30,
            what="the node to start its escapees",
        )
        pids = {name: int((marks / name).read_text()) for name in ESCAPEES}
        if then == "cancel":
            cancel = engine.client(admin).request("POST", f"/runs/{run['id']}/cancel")
            assert cancel.status == 200, cancel
        ended = wait_run(engine, admin, run["id"])
        assert ended["state"] == ("succeeded" if then == "return" else "cancelled")
        _all_gone_within_5_s(pids, time.monotonic())
    finally:
        if worker is not None:
            worker.stop()
        engine.stop()
