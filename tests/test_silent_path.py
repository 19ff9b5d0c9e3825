"""A worker behind a path that goes silent (no FIN, no RST) keeps running its call; the
engine fails it as gone by its silence rule. A second copy never starts while the first
may still run (issue 64, item 4): the retry elsewhere waits for the worker's own deadline
(which its hello told the engine), or for the worker back and told to drop its copy.
Real engine and agents; a TCP relay that stops carrying bytes, and the rules shortened
(the engine's 4 s of silence, which the agent takes from its welcome; a short
--engine-away-s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import EngineProcess, start_engine
from tests.support.process import alive, written_pid
from tests.support.proxy import PausableProxy
from tests.support.runs import code, node_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, attach_url, start_labelled_worker

pytestmark = pytest.mark.process


def _once_then_checks(ledger: Path) -> str:
    """Node code: the first copy notes its pid and runs on; a later one notes whether the
    first copy's process was still alive when it started, and ends."""
    return code(f"""
        import os, time
        def process():
            ledger = {str(ledger)!r}
            if os.path.exists(ledger):
                first = int(open(ledger).read().split()[1])
                try:
                    with open(f"/proc/{{first}}/stat") as stat:
                        alive = stat.read().rsplit(")", 1)[1].split()[0] != "Z"
                except OSError:
                    alive = False
                open(ledger, "a").write("again " + ("overlapped" if alive else "alone") + "\\n")
                return "retried"
            open(ledger, "a").write(f"first {{os.getpid()}}\\n")
            time.sleep(120)
    """)


def _cut_off_with_its_call(
    tmp_path: Path, away_s: str
) -> tuple[EngineProcess, str, PausableProxy, WorkerProcess, Path, str]:
    """An engine, a worker behind a relay (``--engine-away-s away_s``) running a call
    that has one retry: the engine, its token, the relay, the worker, the ledger and the
    run."""
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=("--worker-gone-s", "4"))
    admin = engine.login()
    proxy = PausableProxy(int(engine.url.rsplit(":", 1)[1]))
    url = attach_url(engine, proxy.port)
    far = start_labelled_worker(
        engine, admin, "cpu", tmp_path / "far", "--engine-away-s", away_s, url=url
    )
    ledger = tmp_path / "ledger"
    node: dict[str, Any] = {"id": "n", "worker": "cpu", "code": _once_then_checks(ledger)}
    run_id = run_flow(engine, admin, "cut", [{**node, "retries": 1}])
    wait_for(ledger.exists, timeout=60, what="the first copy to start behind the relay")
    return engine, admin, proxy, far, ledger, run_id


def test_a_call_behind_a_silent_path_runs_elsewhere_only_once_its_copy_is_stopped(
    tmp_path: Path,
) -> None:
    # Before, the engine failed the call at its silence rule and the retry started at once
    # on the other worker, while the first copy ran on behind the silent path.
    engine, admin, proxy, far, ledger, run_id = _cut_off_with_its_call(tmp_path, "2")
    near = start_labelled_worker(engine, admin, "cpu", tmp_path / "near")
    try:
        proxy.pause()
        run = wait_run(engine, admin, run_id, timeout=90)
        assert run["state"] == "succeeded", run
        assert ledger.read_text().splitlines()[1] == "again alone", ledger.read_text()
        retried = [
            e for e in node_of(engine, admin, run_id, "n")["events"] if e["event"] == "retried"
        ]
        assert retried and retried[0]["outputs"]["in_s"] > 4, retried
        assert "stopping 1 call(s) and exiting" in far.logs(), far.logs()[-2000:]
    finally:
        proxy.resume()
        for process in (near, far, engine):
            process.stop()
        proxy.close()


def test_a_worker_back_from_a_silent_path_drops_its_copy_and_the_retry_goes_at_once(
    tmp_path: Path,
) -> None:
    engine, admin, proxy, far, ledger, run_id = _cut_off_with_its_call(tmp_path, "30")
    try:
        proxy.pause()
        wait_for(
            lambda: node_of(engine, admin, run_id, "n")["state"] == "pending",
            timeout=30,
            what="the call failed as gone, its retry waiting for the worker's deadline",
        )
        proxy.resume()  # the worker is back before its deadline: told to drop its copy
        run = wait_run(engine, admin, run_id, timeout=30)
        assert run["state"] == "succeeded", run
        assert ledger.read_text().splitlines()[1] == "again alone", ledger.read_text()
    finally:
        proxy.resume()
        far.stop()
        engine.stop()
        proxy.close()


def test_a_frozen_engine_past_the_silence_rule_fails_the_call_once_and_its_copy_stops(
    tmp_path: Path,
) -> None:
    # The stated outcome (docs/workers.md, "A frozen engine"): the worker gives the frozen
    # engine up by its rule and dials again, keeping the call; the engine, woken, finds
    # that connection closed and fails the call WorkerGone; the worker, back, is told to
    # drop its copy, which stops. Nothing runs on unseen, and nothing runs twice.
    pid_file = tmp_path / "pid"
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=("--worker-gone-s", "4"))
    worker = None
    try:
        admin = engine.login()
        worker = start_labelled_worker(engine, admin, "cpu", tmp_path / "w")
        held = code(f"""
            import os, time
            def process():
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(120)
        """)
        run_id = run_flow(engine, admin, "frozen", [{"id": "n", "worker": "cpu", "code": held}])
        pid = written_pid(pid_file)
        engine.freeze()
        try:
            wait_for(
                lambda: "no message from the engine for 4 s" in worker.logs(),
                timeout=30,
                what="the worker to give the frozen engine up",
            )
        finally:
            engine.thaw()
        run = wait_run(engine, admin, run_id, timeout=60)
        error = run["nodes"][0]["error"]
        assert (run["state"], error["type"]) == ("failed", "WorkerGone"), run
        wait_for(lambda: not alive(pid), timeout=30, what="the worker's copy to stop")
        assert worker.process.poll() is None, "the worker carries on"
    finally:
        if worker is not None:
            worker.stop()
        engine.stop()
