"""A host without pip: runner.py and agent.py, fetched from the engine, run as two files."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from tests.support.engine import EngineProcess
from tests.support.runs import run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import start_labelled_worker

pytestmark = pytest.mark.process


def test_the_two_files_attach_and_run_a_call(engine: EngineProcess, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    for endpoint, name in (("runtime", "runner.py"), ("agent.py", "agent.py")):
        answer = engine.client().request("GET", f"/workers/{endpoint}")
        assert answer.status == 200 and isinstance(answer.body, bytes)
        (host / name).write_bytes(answer.body)

    agent_source = (host / "agent.py").read_text()
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(agent_source))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {name for name in imported if name and name.startswith("fluksio")}, (
        "the standalone agent must not need the fluksio package"
    )

    admin = engine.login()
    worker = start_labelled_worker(
        engine,
        admin,
        "shed",
        tmp_path / "logs",
        "--name",
        "pi",
        command=[sys.executable, "agent.py"],
        cwd=host,
        token_name="no-pip",
    )
    try:
        # Read once the child has exec'd: before that, /proc shows the parent's command.
        wait_for(
            lambda: (
                Path(f"/proc/{worker.pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"agent.py"]
            ),
            timeout=10,
            what="the worker process to be python agent.py",
        )
        relay = (
            "import fluksio\ndef process():\n    fluksio.emit(state='on')\n    return 'switched'\n"
        )
        run_id = run_flow(engine, admin, "shed", [{"id": "relay", "worker": "shed", "code": relay}])
        done = wait_run(engine, admin, run_id, timeout=60)
        node = done["nodes"][0]
        assert (node["result"], node["ran_on"]) == ("switched", "no-pip/pi")
        assert [e["outputs"] for e in node["events"]] == [{"state": "on"}]
        workers = engine.client(admin).request("GET", "/workers").body
        assert [w["version"] for w in workers if w["name"] == "no-pip/pi"] == ["0.2.0"]
    finally:
        worker.stop()
