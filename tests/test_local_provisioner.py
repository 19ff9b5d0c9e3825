"""The example plugin in plugins/local, installed like a third party's, provisioning for real.

It takes the same path as the Slurm provisioner: the scheduler asks, the driver submits
through the hooks, a worker dials back with the request's token and runs the node.
"""

from __future__ import annotations

import re
from importlib.metadata import distribution
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import (
    EngineProcess,
    attach_url_on,
    free_port,
    start_engine,
    write_provisioners,
)
from tests.support.process import alive
from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.wait import wait_for

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SOURCE = ROOT / "plugins" / "local" / "fluksio_local" / "plugin.py"
GUIDE = ROOT / "docs" / "writing-a-provisioner.md"
COMMAND_LINE_QUEUE = "### A queue that takes a command line, not a script"


def _engine(tmp_path: Path, **changes: Any) -> tuple[EngineProcess, str]:
    port = free_port()
    data_dir = tmp_path / "data"
    entry = {
        "type": "local",
        "name": "here",
        "engine_url": attach_url_on(port),
        "max_idle_s": 1,
        "poll_interval_s": 0.2,
        "log_dir": str(tmp_path / "workers"),
        "profiles": [{"name": "box", "cpus": 1, "labels": ["laptop"]}],
        **changes,
    }
    write_provisioners(data_dir, [entry])
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    return engine, engine.login()


def _profile(engine: EngineProcess, token: str) -> dict[str, Any]:
    body = engine.client(token).request("GET", "/workers/resources").body
    (provisioner,) = body["provisioners"]
    assert provisioner["type"] == "local"
    (profile,) = provisioner["profiles"]
    view: dict[str, Any] = profile
    return view


def test_the_plugin_is_a_separate_distribution_found_by_its_entry_point() -> None:
    points = distribution("fluksio-local").entry_points
    assert [(p.group, p.name) for p in points] == [("fluksio.provisioners", "local")]
    assert "fluksio_local" not in (ROOT / "pyproject.toml").read_text()


def test_a_node_for_laptop_gets_a_local_worker_that_leaves_when_idle(tmp_path: Path) -> None:
    engine, token = _engine(tmp_path)
    try:
        node = code(
            """
            def process():
                return {"ok": True}
            """
        )
        assert put_flow(engine, token, "local", [{"id": "n", "worker": "laptop", "code": node}])
        run_id = start_run(engine, token, "local")["id"]

        def started() -> dict[str, Any] | None:
            outstanding: dict[str, Any] | None = _profile(engine, token)["outstanding"]
            return outstanding if outstanding and outstanding["job_id"] else None

        pid = int(wait_for(started, timeout=20, what="a local worker to start")["job_id"])
        run = wait_run(engine, token, run_id, timeout=30)
        assert run["state"] == "succeeded" and run["nodes"][0]["ran_on"] == "here-box", run
        wait_for(lambda: not alive(pid), timeout=30, what="the idle worker to exit")
        wait_for(lambda: not _profile(engine, token)["jobs"], timeout=20, what="the request to end")
        tokens = engine.client(token).request("GET", "/workers/tokens").body
        assert [t["status"] for t in tokens if t["name"] == "here-box"] == ["revoked"]
    finally:
        engine.stop()


def test_the_guide_shows_the_plugins_real_code() -> None:
    # The local plugin's, and for SSH, the Grid Engine plugin's.
    gridengine = sorted((ROOT / "plugins" / "gridengine" / "fluksio_gridengine").glob("*.py"))
    source = "\n".join(path.read_text() for path in [PLUGIN_SOURCE, *gridengine])
    text = GUIDE.read_text()
    # The command-line queue is no plugin's: test_batch_from_the_guide.py runs it as written.
    ran_there = text.split(COMMAND_LINE_QUEUE)[1].split("\n### ")[0]
    blocks = re.findall(r"```python\n(.*?)```", text.replace(ran_there, ""), flags=re.S)
    assert len(blocks) >= 3
    for block in blocks:
        # Line by line, without indentation and blank lines: methods appear dedented in the
        # guide, where ``ruff format`` formats them (and spaces them) as top-level code.
        assert _lines(block) in _lines(source), (
            f"docs/writing-a-provisioner.md drifted from the plugin:\n{block}"
        )


def _lines(text: str) -> str:
    return "".join(f"\n{line.strip()}" for line in text.splitlines() if line.strip()) + "\n"
