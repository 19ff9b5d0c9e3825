"""`make run`, the README's first command, runs the example flow end to end."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


def test_make_run_runs_the_example_flow_and_says_where_each_node_ran(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update(
        FLUKSIO_DEMO_ONESHOT="1", FLUKSIO_DEMO_PORT="0", FLUKSIO_DEMO_DIR=str(tmp_path / "demo")
    )
    done = subprocess.run(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "Flow 'hello' saved with 4 node(s)." in out
    assert "of 'hello': succeeded" in out
    # Read as a log: the run's last line says it succeeded, after its last node's line.
    followed = [line for line in out.splitlines() if line.startswith(("run ", "  "))]
    assert followed[-1].startswith("run ") and followed[-1].endswith("of 'hello': succeeded")
    assert '-> {"count": 5, "sum_of_squares": 55}' in out
    node_lines = [line for line in out.splitlines() if line.startswith("  ")]
    lines = [line.split() for line in node_lines if not line.strip().startswith("on ")]
    # Followed live, a node may show first as pending or queued: where it ran is on the
    # line that says it succeeded.
    where = {fields[0]: fields[2] for fields in lines if fields[1] == "succeeded"}
    assert where == {
        "numbers": "engine",
        "squares": "engine",
        "summary": "engine",
        "host": "local-box/demo",
    }
    # Under each node, where it ran: the worker's host too.
    assert f"on local-box/demo (host {socket.gethostname()})" in out
    assert f"on engine (host {socket.gethostname()})" in out
    worker_log = (tmp_path / "demo" / "worker.log").read_text()
    assert "attached to" in worker_log and "eyJ" not in worker_log
    password = (tmp_path / "demo" / "password").read_text().strip()
    assert password not in out + done.stderr, "the password stays in its 0600 file"
    assert ((tmp_path / "demo" / "password").stat().st_mode & 0o777) == 0o600
