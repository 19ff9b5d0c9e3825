"""A call keeps to its memory: its processes together, past its ``ram_mb``, are stopped
with the whole tree and the call fails ``NodeOutOfMemory`` naming the peak and the bound;
the launcher (so the worker, or the engine) and its other calls go on."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fluksio.agent.launcher import Launcher
from tests.support.engine import start_engine
from tests.support.launching import launcher, run
from tests.support.process import alive
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.wait import async_wait_for
from tests.support.worker import start_labelled_worker

pytestmark = pytest.mark.process
__all__ = ["launcher"]  # the fixture, used by name

GROWING = """
    import time
    def process(mb, step_mb=10):
        held = []
        for _ in range(mb // step_mb):
            held.append(b"x" * (step_mb << 20))  # written, so resident
            time.sleep(0.02)
        return len(held) * step_mb
"""

CHILD_GROWS = """
    import pathlib, subprocess, sys, time
    def process(mb, pid_file):
        grow = f"import time; held = b'x' * ({mb} << 20); time.sleep(60)"
        child = subprocess.Popen([sys.executable, "-c", grow])
        pathlib.Path(pid_file).write_text(str(child.pid))
        time.sleep(60)
        return "never"
"""


def _peak_mb(message: str) -> int:
    found = re.search(r"held ([\d,]+) MB", message)
    assert found is not None, message
    return int(found.group(1).replace(",", ""))


async def test_a_call_past_its_ram_mb_is_stopped_and_says_its_peak(launcher: Launcher) -> None:
    outcome, _ = await asyncio.wait_for(run(launcher, GROWING, kwargs={"mb": 1500}, ram_mb=150), 60)
    assert not outcome.ok
    error = outcome.error or {}
    assert error.get("type") == "NodeOutOfMemory", outcome
    assert "over its ram_mb of 150 MB" in error["message"]
    # Stopped soon after it passed its bound, long before it held what it wanted.
    assert 150 < _peak_mb(error["message"]) < 600, error["message"]

    # The launcher goes on: the next call runs, and one within its bound is not stopped.
    again, _ = await asyncio.wait_for(run(launcher, GROWING, kwargs={"mb": 60}, ram_mb=300), 60)
    assert again.ok and again.result == 60, again


async def test_what_the_call_started_counts_and_is_stopped_with_it(
    launcher: Launcher, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"
    outcome, _ = await asyncio.wait_for(
        run(launcher, CHILD_GROWS, kwargs={"mb": 400, "pid_file": str(pid_file)}, ram_mb=200),
        60,
    )
    assert (outcome.error or {}).get("type") == "NodeOutOfMemory", outcome
    child = int(pid_file.read_text())
    await async_wait_for(lambda: not alive(child), timeout=10, what="the call's child to end")


async def test_a_call_that_sets_none_is_held_to_its_workers_memory_and_told_so() -> None:
    worker_sized = Launcher(mode="fork", ram_mb=150)  # as fluksio-worker --ram-mb 150 makes it
    await worker_sized.start()
    try:
        outcome, _ = await asyncio.wait_for(run(worker_sized, GROWING, kwargs={"mb": 1500}), 60)
        message = (outcome.error or {}).get("message", "")
        assert (outcome.error or {}).get("type") == "NodeOutOfMemory", outcome
        assert "over the 150 MB its worker has (fluksio-worker --ram-mb)" in message
        assert "give the node resources.ram_mb" in message
        # Its own ram_mb, larger, is what holds a call that sets one.
        own, _ = await asyncio.wait_for(
            run(worker_sized, GROWING, call_id="c2", kwargs={"mb": 200}, ram_mb=400), 60
        )
        assert own.ok and own.result == 200, own
    finally:
        await worker_sized.close()


async def test_a_call_without_a_bound_is_not_watched(launcher: Launcher) -> None:
    outcome, _ = await asyncio.wait_for(run(launcher, GROWING, kwargs={"mb": 200}), 60)
    assert outcome.ok and outcome.result == 200, outcome


def test_on_a_worker_and_on_the_engine_the_call_fails_and_the_place_goes_on(
    tmp_path: Path,
) -> None:
    """Through the real engine and agent: the engine sends the node's ``ram_mb`` with the
    call, the agent stops it; a call on the engine is bounded by the engine's launcher the
    same way. Each place then runs the next call."""
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    admin = engine.login()
    worker = start_labelled_worker(engine, admin, "cpu", tmp_path / "worker")
    try:
        for place, label in (("worker", {"worker": "cpu"}), ("engine", {})):
            greedy = {"id": "greedy", "code": code(GROWING), "params": {"mb": 1500}, **label}
            greedy["resources"] = {"ram_mb": 150}
            run = wait_run(engine, admin, run_flow(engine, admin, f"greedy-{place}", [greedy]))
            error = nodes_of(run)["greedy"]["error"]
            assert (run["state"], error["type"]) == ("failed", "NodeOutOfMemory"), run
            assert "over its ram_mb of 150 MB" in error["message"], error
            modest = {"id": "modest", "code": code(GROWING), "params": {"mb": 40}, **label}
            modest["resources"] = {"ram_mb": 150}
            again = wait_run(engine, admin, run_flow(engine, admin, f"modest-{place}", [modest]))
            assert nodes_of(again)["modest"]["result"] == 40, (place, again)
        assert worker.process.poll() is None, worker.logs()
    finally:
        worker.stop()
        engine.stop()
