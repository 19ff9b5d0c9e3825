"""The agent's command line: usage errors in one sentence with exit 2, and --python
choosing the interpreter node code runs on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.engine import BIN, EngineProcess
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.worker import WorkerProcess, start_worker

pytestmark = pytest.mark.process


# -- the agent's command line --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (
            ["--url", "ws://example.com/api/v1/workers/attach"],
            {"FLUKSIO_WORKER_TOKEN": "t"},
            "use wss://",
        ),
        (
            ["--url", "ftp://x/api/v1/workers/attach"],
            {"FLUKSIO_WORKER_TOKEN": "t"},
            "must start with wss://",
        ),
        (
            ["--url", "wss://example.com/somewhere"],
            {"FLUKSIO_WORKER_TOKEN": "t"},
            "ending in /api/v1/workers/attach",
        ),
        (["--url", "ws://127.0.0.1:9/api/v1/workers/attach"], {}, "no worker token"),
        (
            ["--url", "ws://127.0.0.1:9/api/v1/workers/attach", "--python", "/nonexistent/python"],
            {"FLUKSIO_WORKER_TOKEN": "t"},
            "--python",
        ),
        (
            ["--url", "ws://127.0.0.1:9/api/v1/workers/attach", "--labels", "a b"],
            {"FLUKSIO_WORKER_TOKEN": "t"},
            "--labels",
        ),
    ],
    ids=["plain-ws-remote", "bad-scheme", "not-attach-path", "no-token", "bad-python", "bad-label"],
)
def test_usage_errors_are_one_sentence_and_exit_2(
    args: list[str], env: dict[str, str], needle: str
) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    done = subprocess.run(
        [str(BIN / "fluksio-worker"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_python_selects_the_interpreter_node_code_runs_on(
    engine: EngineProcess, admin_token: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    candidates = sorted((Path.home() / ".pyenv" / "versions").glob("3.12.*/bin/python3.12"))
    if not candidates:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have Python 3.12 under pyenv for --python")
        pytest.skip("no Python 3.12 under pyenv")
    token = engine.mint(admin_token, "py312", ["py"])["token"]
    workers.append(
        start_worker(
            engine, token, tmp_path / "w", "--labels", "py", "--python", str(candidates[-1])
        )
    )
    run_id = run_flow(
        engine,
        admin_token,
        "version",
        [
            {
                "id": "v",
                "worker": "py",
                "code": code("""
        import sys
        def process():
            return [list(sys.version_info[:2]), sys.executable]
    """),
            }
        ],
    )
    result = nodes_of(wait_run(engine, admin_token, run_id))["v"]["result"]
    assert result[0] == [3, 12] and result[1] == str(candidates[-1])
    listed = engine.client(admin_token).request("GET", "/workers").body
    worker = next(w for w in listed if w["name"].startswith("py312"))
    assert worker["python"] == str(candidates[-1]) and worker["python_version"] == "3.12"
    # Code only a newer Python parses is saved, runs there, and gets its arguments by its
    # signature although the engine could not read it; an error names the worker's Python.
    newer = code("""
        type Pair = tuple[int, int]
        def process[T](x: T, factor) -> str:
            return f"{"twice"} {x * factor}"
    """)
    broken = "def process(:\n    pass\n"
    assert (
        engine.client(admin_token)
        .request(
            "PUT",
            "/flows/newer",
            json_body={
                "nodes": [
                    {"id": "new", "worker": "py", "code": newer, "params": {"factor": 2}},
                    {"id": "broken", "worker": "py", "code": broken},
                ]
            },
        )
        .status
        == 201
    )
    answer = engine.client(admin_token).request(
        "POST", "/flows/newer/runs", json_body={"params": {"x": 21}}
    )
    nodes = nodes_of(wait_run(engine, admin_token, answer.body["id"]))
    assert nodes["new"]["state"] == "succeeded", nodes["new"]
    assert nodes["new"]["result"] == "twice 42"
    error = nodes["broken"]["error"]
    assert error["type"] == "SyntaxError", error
    assert error["message"] == (
        "invalid syntax (<node broken>, line 1)"
        f" (compiled on worker {worker['name']} with Python 3.12)"
    ), error
