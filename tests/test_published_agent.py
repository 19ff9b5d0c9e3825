"""The published fluksio-worker 0.1.6 from PyPI, unchanged, against our engine.

It is installed into its own Python 3.12 virtual environment (it needs 3.12 or later),
attaches with its token in the query string, and runs, reports and cancels nodes, over
``wss://`` too (trusting a private CA through ``SSL_CERT_FILE``). On a
laptop without Python 3.12 under pyenv the module skips; under CI=true it fails instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import CertificateAuthority
from tests.support.cli import fluksio, follow_logs
from tests.support.containers import TRIXIE
from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.process import alive, connected_to
from tests.support.runs import node_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, attach_url, start_worker

pytestmark = pytest.mark.process

PUBLISHED = "fluksio-worker==0.1.6"
PYENV = Path.home() / ".pyenv" / "versions"


@pytest.fixture(scope="module")
def published_agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    candidates = sorted(PYENV.glob("3.1[2-9].*/bin/python3.1[2-9]"))
    if not candidates:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must have Python 3.12+ under {PYENV} for the published agent")
        pytest.skip("no Python 3.12+ under pyenv for the published agent")
    where = tmp_path_factory.mktemp("published-agent")
    subprocess.run([str(candidates[0]), "-m", "venv", str(where)], check=True, timeout=120)
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", PUBLISHED],
        check=True,
        timeout=600,
        capture_output=True,
    )
    return where / "bin" / "fluksio-worker"


@pytest.fixture
def attached_published(
    engine: EngineProcess, published_agent: Path, tmp_path: Path
) -> Iterator[tuple[str, WorkerProcess]]:
    admin = engine.login()
    worker = _attach_published(engine, admin, published_agent, tmp_path, "--gpus", "2")
    try:
        yield admin, worker
    finally:
        worker.stop()


def _attach_published(
    engine: EngineProcess,
    admin: str,
    agent: Path,
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    """The published agent as ``published/pub`` with label ``gpu``, once it is listed."""
    token = engine.mint(admin, "published", ["gpu"])["token"]
    worker = start_worker(
        engine, token, tmp_path / "w", "--labels", "gpu", "--name", "pub", *args,
        executable=agent, env=env,
    )  # fmt: skip
    try:
        wait_for(lambda: _worker(engine, admin), timeout=30, what="the published agent to attach")
    except BaseException:
        worker.stop()
        raise
    return worker


def _run_on_it(
    engine: EngineProcess, admin: str, flow: str, source: str, **fields: Any
) -> dict[str, Any]:
    """Run one node bound to the published agent (label ``gpu``); the node once it ended."""
    node = {"id": "n", "worker": "gpu", "code": textwrap.dedent(source), **fields}
    run = wait_run(engine, admin, run_flow(engine, admin, flow, [node]), timeout=60)
    nodes: list[dict[str, Any]] = run["nodes"]
    return nodes[0]


def _worker(engine: EngineProcess, admin: str) -> dict[str, Any] | None:
    workers = engine.client(admin).request("GET", "/workers").body
    return next((w for w in workers if w["name"] == "published/pub"), None)


def test_it_attaches_and_is_listed_with_its_inventory(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    admin, _worker_process = attached_published
    worker = _worker(engine, admin)
    assert worker is not None
    assert (worker["protocol"], worker["version"], worker["status"]) == (2, "0.1.x", "idle")
    assert worker["inventory"]["gpus"] == 2 and worker["inventory"]["cpus"]
    assert worker["labels"] == ["gpu"]


def test_it_runs_a_node_with_events_and_logs(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    admin, worker = attached_published
    run_id = run_flow(
        engine,
        admin,
        "pub",
        [
            {
                "id": "work",
                "worker": "gpu",
                "resources": {"gpus": 1},
                "params": {"x": 6},
                "code": textwrap.dedent("""
        import os, fluksio
        def process(x):
            fluksio.emit(progress=0.5)
            print("working")
            return {"double": x * 2, "devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    """),
            }
        ],
    )
    run = wait_run(engine, admin, run_id)
    assert run["state"] == "succeeded", run
    node = run["nodes"][0]
    assert node["ran_on"] == "published/pub"
    assert node["result"] == {"double": 12, "devices": "0"}
    assert [e["outputs"] for e in node["events"]] == [{"progress": 0.5}]
    assert "working" in node["logs"]
    # It sent its token in the query string: the engine's log must not show it.
    token_lines = [line for line in engine.logs().splitlines() if "eyJ" in line]
    assert token_lines == []
    assert worker.process.poll() is None


def test_cancel_reaches_it_and_kills_the_node(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess], tmp_path: Path
) -> None:
    admin, _worker = attached_published
    pid_file = tmp_path / "node.pid"
    run_id = run_flow(
        engine,
        admin,
        "pub",
        [
            {
                "id": "hang",
                "worker": "gpu",
                "code": textwrap.dedent(f"""
        import os, time
        def process():
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(120)
    """),
            }
        ],
    )
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=30, what="the node")
    pid = int(pid_file.read_text())
    assert engine.client(admin).request("POST", f"/runs/{run_id}/cancel").status == 200
    run = wait_run(engine, admin, run_id, timeout=20)
    assert run["state"] == "cancelled", run
    assert run["nodes"][0]["state"] == "cancelled"
    wait_for(lambda: not alive(pid), timeout=20, what="the node's process to be killed")


def test_over_wss_it_trusts_a_private_ca_through_ssl_cert_file(
    published_agent: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("engine", ["127.0.0.1", "localhost"])
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.pem))  # this test's own REST calls
    engine = start_engine(
        tmp_path / "data",
        tmp_path / "logs",
        args=("--tls-cert", str(pair.cert), "--tls-key", str(pair.key)),
    )
    worker = None
    try:
        admin = engine.login()
        assert attach_url(engine).startswith("wss://")
        worker = _attach_published(
            engine, admin, published_agent, tmp_path, env={"SSL_CERT_FILE": str(ca.pem)}
        )
        # Its artifacts go over https, derived from the wss URL, with the same trust.
        run_id = run_flow(
            engine, admin, "pub-tls", [{"id": "n", "worker": "gpu", "code": ROUND_TRIP}]
        )
        run = wait_run(engine, admin, run_id, timeout=60)
        assert run["state"] == "succeeded", run
        assert run["nodes"][0]["result"] == "over tls"
    finally:
        if worker is not None:
            worker.stop()
        engine.stop()


ROUND_TRIP = textwrap.dedent("""
    import fluksio
    def process():
        ref = fluksio.save_artifact(b"over tls", name="t.txt")
        return open(fluksio.load_artifact(ref), "rb").read().decode()
""")


def test_its_artifact_helpers_work_against_this_engine(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    admin, _worker = attached_published
    run_id = run_flow(
        engine,
        admin,
        "pub-art",
        [
            {
                "id": "save",
                "worker": "gpu",
                "code": textwrap.dedent("""
            import fluksio
            def process():
                return fluksio.save_artifact(b"made by the published agent", name="p.txt")
        """),
            },
            {
                "id": "load",
                "worker": "gpu",
                "after": ["save"],
                "code": textwrap.dedent("""
            import fluksio
            def process(save):
                return open(fluksio.load_artifact(save), "rb").read().decode()
        """),
            },
        ],
    )
    run = wait_run(engine, admin, run_id, timeout=60)
    assert run["state"] == "succeeded", run
    by_id = {node["id"]: node for node in run["nodes"]}
    assert by_id["load"]["result"] == "made by the published agent"
    digest = by_id["save"]["result"]["digest"]
    stored = engine.client(admin).request("GET", f"/artifacts/{digest}")
    assert stored.status == 200 and stored.body == b"made by the published agent"


def test_the_engine_stops_its_call_at_the_limit_it_ignores(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess], tmp_path: Path
) -> None:
    # The published agent knows no "limit" in the run frame: the engine cancels the call
    # there itself, and fails it as past its limit, not as cancelled.
    admin, worker = attached_published
    pid_file = tmp_path / "node.pid"
    chatty = f"""
        import os, time, fluksio
        def process():
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            while True:
                fluksio.emit(alive=True)
                time.sleep(0.2)
    """
    node = _run_on_it(engine, admin, "pub-limit", chatty, timeout=1, limit=2)
    assert node["state"] == "failed", node
    assert node["error"]["type"] == "NodeLimit"
    assert node["error"]["message"] == "ran for 2 s, its limit, and was stopped"
    pid = int(pid_file.read_text())
    wait_for(lambda: not alive(pid), timeout=20, what="the node's process to be killed")
    assert worker.process.poll() is None


def test_code_in_its_newer_python_is_saved_and_runs_there(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    admin, _worker = attached_published
    newer = """
        type Pair = tuple[int, int]
        def process(**given):
            return f"{"from 3.12"} {sorted(given)}"
    """
    node = _run_on_it(engine, admin, "pub-newer", newer)
    assert (node["state"], node["result"]) == ("succeeded", "from 3.12 []"), node


def test_a_call_longer_than_the_take_bound_is_not_taken_from_it(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    # It says nothing when it takes a call, and its first heartbeat comes 10 s later: its
    # pong to the engine's ping after the run frame is what shows it took it, awake.
    admin, _worker = attached_published
    long = "import time\ndef process():\n    time.sleep(18)\n    return 'once'\n"
    node = _run_on_it(engine, admin, "pub-long", long)
    assert (node["state"], node["result"], node["ran_on"]) == ("succeeded", "once", "published/pub")
    assert node["events"] == [], "never requeued"


def test_its_call_fails_engine_restarted_when_the_engine_restarts(
    published_agent: Path, tmp_path: Path
) -> None:
    # It cannot name what it runs when it comes back, so the restarted engine cannot adopt
    # the call (ours can): the call fails as it did before, saying why, once it is back.
    port, data = free_port(), tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1", port=port)
    second: EngineProcess | None = None
    admin = engine.login()
    worker = _attach_published(engine, admin, published_agent, tmp_path)
    try:
        long = "import time\ndef process():\n    time.sleep(60)\n    return 'late'\n"
        node = {"id": "n", "worker": "gpu", "code": long}
        run_id = run_flow(engine, admin, "pub-restart", [node])
        wait_for(
            lambda: node_of(engine, admin, run_id, "n")["state"] == "running",
            timeout=30,
            what="the call to run on it",
        )
        engine.stop(signal.SIGKILL)
        second = start_engine(data, tmp_path / "logs2", port=port)
        admin = second.login()
        run = wait_run(second, admin, run_id, timeout=120)
        error = run["nodes"][0]["error"]
        assert (run["state"], error["type"]) == ("failed", "EngineRestarted"), run
        assert "cannot carry a call over an engine's restart" in error["message"]
    finally:
        worker.stop()
        engine.stop()
        if second is not None:
            second.stop()


def test_its_output_is_read_by_the_logs_route_and_the_command_line(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    # It sends a call's output only with its answer: the ended call's lines come from the
    # node's stored record, for the route and for ``runs logs`` with and without --follow.
    admin, _worker = attached_published
    three = "def process():\n    for n in range(3):\n        print(f'line {n}')\n"
    node = {"id": "n", "worker": "gpu", "code": three}
    run_id = run_flow(engine, admin, "pub-logs", [node])
    assert wait_run(engine, admin, run_id)["state"] == "succeeded"
    wanted = ["line 0", "line 1", "line 2"]
    answer = engine.client(admin).request("GET", f"/runs/{run_id}/logs").body
    assert (answer["lines"], answer["ended"], answer["next"]) == (wanted, True, 3), answer
    env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": admin}
    for follow in ([], ["--follow"]):
        printed = fluksio("runs", "logs", run_id, *follow, env=env, timeout=30)
        assert (printed.returncode, printed.stdout.splitlines()) == (0, wanted), printed


def test_a_follower_started_while_its_call_runs_prints_the_lines_when_they_come(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess], tmp_path: Path
) -> None:
    # Before, `runs logs --follow` started while such a call ran printed nothing and
    # exited 0: the engine answered `ended` with no lines as the call ended.
    admin, _worker = attached_published
    release = tmp_path / "release"
    held = f"""
        import os, time
        def process():
            for n in range(3):
                print(f'line {{n}}')
            while not os.path.exists({str(release)!r}):
                time.sleep(0.05)
    """
    node = {"id": "n", "worker": "gpu", "code": textwrap.dedent(held)}
    run_id = run_flow(engine, admin, "pub-follow", [node])
    wait_for(
        lambda: node_of(engine, admin, run_id, "n")["state"] == "running",
        timeout=30,
        what="the call to run on it",
    )
    follower = follow_logs(engine.api, admin, run_id)
    try:
        port = int(engine.url.rsplit(":", 1)[1])
        wait_for(
            lambda: connected_to(follower.pid, port),
            timeout=30,
            what="the follower to ask the engine while the call runs",
        )
        release.touch()
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
    assert (follower.returncode, out.splitlines()) == (0, ["line 0", "line 1", "line 2"]), err


def test_it_runs_an_arrays_items_each_as_an_ordinary_call(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    admin, _worker_process = attached_published
    items = [{"x": x} for x in range(12)]
    node = _run_on_it(
        engine, admin, "pub-array", "def process(x, y):\n    return x * y\n",
        params={"y": 3}, items=items,
    )  # fmt: skip
    assert node["state"] == "succeeded", node
    assert node["array"]["counts"] == {"succeeded": 12}
    page = engine.client(admin).request("GET", f"/runs/{_last_run(engine, admin)}/items").body
    assert [item["result"] for item in page["items"]] == [x * 3 for x in range(12)]
    assert {item["ran_on"] for item in page["items"]} == {"published/pub"}


def _last_run(engine: EngineProcess, admin: str) -> str:
    runs = engine.client(admin).request("GET", "/runs?limit=1").body
    return str(runs[0]["id"])


def test_a_node_in_a_container_never_goes_to_it_and_says_why(
    engine: EngineProcess, attached_published: tuple[str, WorkerProcess]
) -> None:
    """It runs no containers (it cannot say it does): such a node waits, naming it, and the
    node beside it without one runs there as before."""
    admin, _worker = attached_published
    in_image: dict[str, Any] = {"id": "boxed", "worker": "gpu"}
    in_image |= {"code": "def process():\n    return 1\n", "container": {"image": TRIXIE}}
    plain = {"id": "plain", "worker": "gpu", "code": "def process():\n    return 2\n"}
    run_id = run_flow(engine, admin, "pub-container", [in_image, plain])
    assert wait_for(
        lambda: node_of(engine, admin, run_id, "plain")["state"] == "succeeded",
        timeout=60,
        what="the node without a container to run on it",
    )
    boxed = node_of(engine, admin, run_id, "boxed")
    assert boxed["state"] == "queued", boxed
    assert "of those with 'gpu': published/pub runs no containers" in boxed["reason"], boxed
    engine.client(admin).request("POST", f"/runs/{run_id}/cancel")
