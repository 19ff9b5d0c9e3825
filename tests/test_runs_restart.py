"""Runs across an engine stop, and the command line that follows them: a run whose engine
stopped mid-run loses nothing; `fluksio` puts a flow from files and follows a run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import fluksio
from tests.support.engine import BIN, EngineProcess, free_port, start_engine
from tests.support.process import alive
from tests.support.runs import code, node_of, nodes_of, put_flow, run_flow, start_run
from tests.support.wait import wait_for
from tests.support.worker import start_worker

# -- validation ----------------------------------------------------------------------------


# -- restarts ------------------------------------------------------------------------------


@pytest.mark.process
@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_engine_stopped_mid_run_loses_nothing(tmp_path: Path, stop_signal: int) -> None:
    data = tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1")
    token = engine.login()
    pid_file = tmp_path / "slow.pid"
    put_flow(
        engine,
        token,
        "long",
        [
            {"id": "quick", "code": "def process():\n    return 'kept'\n"},
            {
                "id": "slow",
                "after": ["quick"],
                "code": code(f"""
            import os, time
            def process():
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(120)
        """),
            },
            {
                "id": "again",
                "after": ["quick"],
                "retry_on_restart": True,
                "code": code(f"""
            import os, time
            def process():
                marker = {str(tmp_path / "again-ran")!r}
                first = not os.path.exists(marker)
                open(marker, "a").write("x")
                if first:
                    time.sleep(120)
                return "second attempt"
        """),
            },
            {"id": "needs_gpu", "worker": "gpu", "code": "def process():\n    return 1\n"},
        ],
    )
    run_id = start_run(engine, token, "long")["id"]
    try:
        wait_for(
            # The pid written, not only the file made: open() creates it before write() fills it.
            lambda: (
                pid_file.exists() and pid_file.read_text() and (tmp_path / "again-ran").exists()
            ),
            timeout=20,
            what="both long nodes to start",
        )
        slow_pid = int(pid_file.read_text())
    finally:
        engine.stop(stop_signal)  # also when the wait fails: no engine outlives its test
    wait_for(lambda: not alive(slow_pid), timeout=10, what="the node to die with its engine")

    second = start_engine(data, tmp_path / "logs2")
    try:
        token = second.login()
        described = second.client(token).request("GET", f"/runs/{run_id}").body
        by_id = nodes_of(described)
        assert by_id["quick"]["result"] == "kept"
        # Where it ran outlives the engine that ran it.
        assert by_id["quick"]["provenance"] == {
            "worker": "engine",
            "host": socket.gethostname(),
            "slurm_job_id": None,
            "batch_job": None,
            "gpu_ids": [],
            "provisioner": None,
            "request_id": None,
            "cached_bytes": 0,
        }
        assert by_id["slow"]["state"] == "failed"
        assert by_id["slow"]["error"]["type"] == "EngineRestarted"
        assert by_id["needs_gpu"]["state"] == "queued"
        assert by_id["needs_gpu"]["reason"] == "no attached worker carries label 'gpu'"
        wait_for(
            lambda: node_of(second, token, run_id, "again")["state"] == "succeeded",
            timeout=20,
            what="the retryable node to run again",
        )
        assert node_of(second, token, run_id, "again")["result"] == "second attempt"
        assert second.client(token).request("GET", f"/runs/{run_id}").body["state"] == "running"
    finally:
        second.stop()


# -- the command line ------------------------------------------------------------------------


def test_cli_puts_a_flow_from_files_and_follows_a_run(
    engine: EngineProcess, tmp_path: Path
) -> None:
    (tmp_path / "double.py").write_text("def process(x):\n    return x * 2\n")
    (tmp_path / "flow.json").write_text(
        '{"name": "cli-flow", "nodes": [{"id": "double", "code_file": "double.py"}]}'
    )
    cli_env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": engine.login()}
    put = fluksio("flows", "put", str(tmp_path / "flow.json"), env=cli_env)
    assert put.returncode == 0 and "Flow 'cli-flow' saved with 1 node(s)." in put.stdout
    started = fluksio("runs", "start", "cli-flow", "--param", "x=21", "--follow", env=cli_env)
    assert started.returncode == 0, started.stderr
    assert "succeeded" in started.stdout
    assert "double" in started.stdout and "engine" in started.stdout and "-> 42" in started.stdout
    assert f"on engine (host {socket.gethostname()})" in started.stdout
    failing = fluksio("runs", "start", "cli-flow", "--param", "x=null", "--follow", env=cli_env)
    assert failing.returncode == 1 and "failed" in failing.stdout
    bad = fluksio("runs", "start", "cli-flow", "--param", "x", env=cli_env)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr


@pytest.mark.process
@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_worker_call_runs_again_after_a_restart_as_its_second_attempt(
    tmp_path: Path, stop_signal: int
) -> None:
    # The promise of retry_on_restart holds for a call on a worker however the engine
    # stops, when the call does not live through it (here its worker is started again
    # meanwhile, so it comes back without the call); the rerun is attempt 2, so a follower
    # of its output says so and reads the second process from its first line.
    port = free_port()
    data = tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1", port=port)
    token = engine.login()
    worker_token = engine.mint(token, "steady", ["cpu"])["token"]
    worker = start_worker(engine, worker_token, tmp_path / "w", "--labels", "cpu")
    marker = tmp_path / "ran"
    source = code(f"""
        import os, time
        def process():
            first = not os.path.exists({str(marker)!r})
            open({str(marker)!r}, "a").write("x")
            for n in range(3):
                print(f"{{'first' if first else 'second'}} {{n}}", flush=True)
            if first:
                time.sleep(120)
            return "second attempt"
    """)
    node = {"id": "again", "worker": "cpu", "retry_on_restart": True, "code": source}
    second: EngineProcess | None = None
    follower: subprocess.Popen[bytes] | None = None
    try:
        run_id = run_flow(engine, token, "again", [node])
        cli_env = {**os.environ, "FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": token}
        cli_env["PYTHONUNBUFFERED"] = "1"
        followed = tmp_path / "followed.txt"
        with followed.open("wb") as out:
            follower = subprocess.Popen(
                [str(BIN / "fluksio"), "runs", "logs", run_id, "--follow"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=cli_env,
            )  # fmt: skip
        wait_for(
            lambda: "first 2" in followed.read_text(), timeout=30, what="the first attempt's lines"
        )
        engine.stop(stop_signal)
        worker.stop()
        second = start_engine(data, tmp_path / "logs2", port=port)
        worker = start_worker(second, worker_token, tmp_path / "w", "--labels", "cpu")
        token = second.login()
        wait_for(
            lambda: node_of(second, token, run_id, "again")["state"] == "succeeded",
            timeout=60,
            what="the call to run again on the worker",
        )
        again = node_of(second, token, run_id, "again")
        assert (again["result"], again["attempt"], again["attempts"]) == ("second attempt", 2, 2)
        assert [e["event"] for e in again["events"]] == ["rerun"]
        assert follower.wait(timeout=30) == 0
        lines = followed.read_text().splitlines()
        assert lines == [*(f"first {n}" for n in range(3)), "--- attempt 2 ---"] + [
            f"second {n}" for n in range(3)
        ], lines
        assert worker.process.poll() is None
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
        worker.stop()
        engine.stop()
        if second is not None:
            second.stop()
