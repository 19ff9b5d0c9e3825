"""Remote workers: our agent, real processes, the engine's side of the socket."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.process import alive
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_worker

pytestmark = pytest.mark.process


@pytest.fixture
def admin(engine: EngineProcess) -> str:
    return engine.login()


def listed(engine: EngineProcess, admin: str) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = engine.client(admin).request("GET", "/workers").body
    return body


def attached(engine: EngineProcess, admin: str, name: str) -> dict[str, Any] | None:
    for worker in listed(engine, admin):
        if worker["name"] == name and worker["status"] != "needs upgrade":
            return worker
    return None


def fake_gpu_dev(tmp_path: Path, count: int) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for index in range(count):
        (dev / f"nvidia{index}").touch()
    (dev / "nvidiactl").touch()  # not a GPU: must not be counted
    return dev


# -- the spec's flow -----------------------------------------------------------------------


def test_require_waits_then_runs_on_the_worker_that_attaches(
    engine: EngineProcess, admin: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    token = engine.mint(admin, "gpu-dev", ["gpu", "cuda12"])["token"]
    run_id = run_flow(
        engine,
        admin,
        "train",
        [
            {
                "id": "train",
                "worker": "gpu",
                "worker_policy": "require",
                "timeout": 7200,
                "code": code("""
            import os, socket, fluksio
            def process():
                fluksio.emit(step=1)
                token = os.environ.get("FLUKSIO_WORKER_TOKEN")
                return {"host": socket.gethostname(), "token": token}
        """),
            }
        ],
    )
    queued = get_run(engine, admin, run_id)
    assert queued["state"] == "queued"
    assert queued["reason"] == "no attached worker carries label 'gpu'"

    dev = fake_gpu_dev(tmp_path, 2)
    workers.append(
        start_worker(
            engine,
            token,
            tmp_path / "w",
            "--labels",
            "gpu,cuda12",
            "--name",
            "box",
            "--dev-dir",
            str(dev),
            "--parallel",
            "2",
        )
    )
    run = wait_run(engine, admin, run_id)
    assert run["state"] == "succeeded", run
    train = nodes_of(run)["train"]
    assert train["ran_on"] == "gpu-dev/box"
    assert train["result"]["token"] is None, "the node never sees the worker token"
    assert [e["outputs"] for e in train["events"]] == [{"step": 1}]

    worker = attached(engine, admin, "gpu-dev/box")
    assert worker is not None
    assert worker["labels"] == ["cuda12", "gpu"] and worker["parallel"] == 2
    assert worker["inventory"]["gpus"] == 2, "counted from the fake /dev, nvidiactl left out"
    assert worker["inventory"]["cpus"] and worker["inventory"]["ram_mb"]
    assert (worker["version"], worker["protocol"]) == ("0.2.0", 2)
    assert worker["python"] and worker["venv_digest"]
    assert token not in workers[0].logs()


def test_two_gpu_calls_get_disjoint_devices(
    engine: EngineProcess, admin: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    token = engine.mint(admin, "gpu-box", ["gpu"])["token"]
    workers.append(
        start_worker(
            engine,
            token,
            tmp_path / "w",
            "--labels",
            "gpu",
            "--parallel",
            "2",
            "--dev-dir",
            str(fake_gpu_dev(tmp_path, 4)),
        )
    )
    wait_for(
        lambda: attached(engine, admin, f"gpu-box/{socket.gethostname()}"),
        timeout=20,
        what="the worker to attach",
    )
    grab = code("""
        import os, time
        def process():
            time.sleep(0.5)
            return os.environ["CUDA_VISIBLE_DEVICES"]
    """)
    run_id = run_flow(
        engine,
        admin,
        "two",
        [
            {"id": "a", "worker": "gpu", "resources": {"gpus": 2}, "code": grab},
            {"id": "b", "worker": "gpu", "resources": {"gpus": 2}, "code": grab},
        ],
    )
    run = wait_run(engine, admin, run_id)
    devices = [set(nodes_of(run)[n]["result"].split(",")) for n in ("a", "b")]
    assert all(len(d) == 2 for d in devices)
    assert not devices[0] & devices[1] and devices[0] | devices[1] == {"0", "1", "2", "3"}
    started = [nodes_of(run)[n]["started_at"] for n in ("a", "b")]
    ended_at = [nodes_of(run)[n]["ended_at"] for n in ("a", "b")]
    assert max(started) < min(ended_at), "they ran at the same time"


# -- losing a worker ---------------------------------------------------------------------


def test_a_killed_worker_fails_its_call_within_seconds_and_its_node_dies(
    engine: EngineProcess, admin: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    token = engine.mint(admin, "doomed", ["gpu"])["token"]
    worker = start_worker(engine, token, tmp_path / "w", "--labels", "gpu", "--name", "doomed")
    workers.append(worker)
    pid_file = tmp_path / "node.pid"
    run_id = run_flow(
        engine,
        admin,
        "long",
        [
            {
                "id": "long",
                "worker": "gpu",
                "code": code(f"""
        import os, time
        def process():
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(120)
    """),
            }
        ],
    )
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=20, what="the node")
    node_pid = int(pid_file.read_text())
    worker.stop(signal.SIGKILL)
    run = wait_run(engine, admin, run_id, timeout=5)
    assert nodes_of(run)["long"]["error"]["message"] == "worker went away mid-call"
    wait_for(lambda: not alive(node_pid), timeout=10, what="the node to die with its agent")
    assert attached(engine, admin, "doomed") is None


def test_a_stopped_worker_is_failed_as_gone_after_the_silence_interval(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    engine = start_engine(
        tmp_path / "data",
        tmp_path / "logs",
        args=("--worker-gone-s", "1.5", "--worker-check-s", "0.2"),
    )
    try:
        admin = engine.login()
        token = engine.mint(admin, "frozen", ["gpu"])["token"]
        worker = start_worker(engine, token, tmp_path / "w", "--labels", "gpu", "--name", "frozen")
        workers.append(worker)
        run_id = run_flow(
            engine,
            admin,
            "sleepy",
            [
                {
                    "id": "s",
                    "worker": "gpu",
                    "code": code("""
            import time
            def process():
                time.sleep(60)
        """),
                }
            ],
        )
        wait_for(
            lambda: nodes_of(get_run(engine, admin, run_id))["s"]["state"] == "running",
            timeout=20,
            what="the call to start",
        )
        worker.process.send_signal(signal.SIGSTOP)
        try:
            run = wait_run(engine, admin, run_id, timeout=10)
            message = nodes_of(run)["s"]["error"]["message"]
            assert "no message from the worker for 1.5 s" in message and "gone" in message
        finally:
            worker.process.send_signal(signal.SIGCONT)
    finally:
        engine.stop()


def test_a_call_sent_to_a_stopped_agent_runs_elsewhere_and_never_where_it_wakes(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=("--worker-take-s", "2"))
    try:
        admin = engine.login()
        ran = tmp_path / "ran"
        token = engine.mint(admin, "pair", ["gpu"])["token"]
        stopped = start_worker(engine, token, tmp_path / "a", "--labels", "gpu", "--name", "a")
        workers.append(stopped)
        wait_for(lambda: attached(engine, admin, "pair/a"), timeout=30, what="a to attach")
        stopped.process.send_signal(signal.SIGSTOP)  # frozen before it takes anything
        try:
            node = {
                "id": "once",
                "worker": "gpu",
                "code": code(f"""
            def process():
                with open({str(ran)!r}, "a") as marks:
                    marks.write("ran\\n")
                return "done"
        """),
            }
            run_id = run_flow(engine, admin, "once", [node])
            workers.append(
                start_worker(engine, token, tmp_path / "b", "--labels", "gpu", "--name", "b")
            )
            run = wait_run(engine, admin, run_id, timeout=30)
            assert run["state"] == "succeeded", run
            assert nodes_of(run)["once"]["ran_on"] == "pair/b"
        finally:
            stopped.process.send_signal(signal.SIGCONT)
        # It wakes to the run frame and the engine's cancel behind it: it answers that it
        # dropped the call (an answer the engine no longer waits for), and never runs it.
        wait_for(
            lambda: (
                "cancelled before it started" in stopped.logs()
                or "worker.unknown_call" in engine.logs()
            ),
            timeout=30,
            what="the woken agent to answer for the dropped call",
        )
        assert ran.read_text() == "ran\n", "it ran once, on b"
    finally:
        engine.stop()


# -- refusals ------------------------------------------------------------------------------


def test_revoking_disconnects_and_the_agent_stops_saying_why(
    engine: EngineProcess, admin: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    minted = engine.mint(admin, "revoked", ["cpu"])
    worker = start_worker(
        engine, minted["token"], tmp_path / "w", "--labels", "cpu", "--name", "revoked"
    )
    workers.append(worker)
    wait_for(lambda: attached(engine, admin, "revoked"), timeout=20, what="the worker to attach")
    engine.client(admin).request("POST", f"/workers/tokens/{minted['jti']}/revoke")
    wait_for(
        lambda: attached(engine, admin, "revoked") is None,
        timeout=5,
        what="the revoked worker to be disconnected",
    )
    assert worker.process.wait(timeout=20) == 3
    assert "revoked" in worker.logs()


def _refused(engine: EngineProcess, token: str, tmp_path: Path, *args: str) -> str:
    """What a worker started with ``args`` logged before the engine refused it (exit 3)."""
    worker = start_worker(engine, token, tmp_path / "w", *args)
    assert worker.process.wait(timeout=30) == 3
    return worker.logs()


def test_labels_the_token_does_not_sign_are_refused(
    engine: EngineProcess, admin: str, tmp_path: Path
) -> None:
    token = engine.mint(admin, "honest", ["cpu"])["token"]
    said = _refused(engine, token, tmp_path, "--labels", "cpu,gpu")
    assert "labels gpu are not signed by this worker's token (it signs cpu)" in said


def test_a_name_outside_the_name_rule_is_refused_in_a_sentence(
    engine: EngineProcess, admin: str, tmp_path: Path
) -> None:
    token = engine.mint(admin, "named", ["cpu"])["token"]
    said = _refused(engine, token, tmp_path, "--name", "gpu box #1")
    assert "the worker's name 'gpu box #1' must be 1 to 63 letters, digits" in said
    assert "pass another --name" in said
    assert [w for w in listed(engine, admin) if "gpu box" in w["name"]] == []


def test_a_bad_token_is_refused_before_the_upgrade(engine: EngineProcess, tmp_path: Path) -> None:
    assert "not a valid Fluksio token" in _refused(engine, "not-a-token", tmp_path)


def test_a_second_attach_of_the_same_worker_supersedes_the_first(
    engine: EngineProcess, admin: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    token = engine.mint(admin, "twin", ["cpu"])["token"]
    first = start_worker(engine, token, tmp_path / "a", "--labels", "cpu", "--name", "same")
    workers.append(first)
    wait_for(lambda: attached(engine, admin, "twin/same"), timeout=20, what="the first attach")
    first_id = attached(engine, admin, "twin/same")["id"]  # type: ignore[index]
    second = start_worker(engine, token, tmp_path / "b", "--labels", "cpu", "--name", "same")
    workers.append(second)
    wait_for(
        lambda: (w := attached(engine, admin, "twin/same")) is not None and w["id"] != first_id,
        timeout=20,
        what="the second attach to take over",
    )
    other_host = start_worker(engine, token, tmp_path / "c", "--labels", "cpu", "--name", "other")
    workers.append(other_host)
    wait_for(lambda: attached(engine, admin, "twin/other"), timeout=20, what="the other host")
    second_id = attached(engine, admin, "twin/same")["id"]  # type: ignore[index]
    assert first.process.wait(timeout=20) == 3, "the superseded agent stops, it does not fight"
    assert "superseded by a newer connection" in first.logs()
    names = [w["name"] for w in listed(engine, admin)]
    assert names.count("twin/same") == 1 and "twin/other" in names
    assert attached(engine, admin, "twin/same")["id"] == second_id  # type: ignore[index]


def test_max_idle_exits_zero(engine: EngineProcess, admin: str, tmp_path: Path) -> None:
    token = engine.mint(admin, "brief", [])["token"]
    worker = start_worker(engine, token, tmp_path / "w", "--max-idle", "1")
    assert worker.process.wait(timeout=30) == 0
    assert "idle for 1 s" in worker.logs()


def test_the_agent_reconnects_when_the_engine_restarts(
    tmp_path: Path, workers: list[WorkerProcess]
) -> None:
    port = free_port()
    engine = start_engine(tmp_path / "data", tmp_path / "logs1", port=port)
    admin = engine.login()
    token = engine.mint(admin, "steady", ["cpu"])["token"]
    worker = start_worker(engine, token, tmp_path / "w", "--labels", "cpu", "--name", "steady")
    workers.append(worker)
    wait_for(lambda: attached(engine, admin, "steady"), timeout=20, what="the first attach")
    # A clean stop tells attached workers why and does not wait for them to hang up
    # (within 5 s, else stop() kills it: the code is then not 0).
    assert engine.stop(timeout=5) == 0
    wait_for(
        lambda: "the engine is shutting down" in worker.logs(),
        timeout=10,
        what="the worker to hear why",
    )
    again = start_engine(tmp_path / "data", tmp_path / "logs2", port=port)
    try:
        admin = again.login()
        wait_for(lambda: attached(again, admin, "steady"), timeout=30, what="the reattach")
        assert "reconnecting in" in worker.logs()
        run_id = run_flow(
            again,
            admin,
            "after",
            [{"id": "x", "worker": "cpu", "code": "def process():\n    return 5\n"}],
        )
        assert nodes_of(wait_run(again, admin, run_id))["x"]["result"] == 5
    finally:
        again.stop()
