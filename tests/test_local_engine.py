"""``fluksio.client.local()``: an engine of one's own, and nothing left once it is done.

The same script as against a shared engine runs inside ``with local() as client:``; its
calls run on this machine (on the engine, or on a local worker when one is asked for).
Afterwards the engine no longer answers, its thread and every process it or its worker
started are gone, and its data directory is deleted.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import pytest

from fluksio.client import Client, ClientError, local
from tests.support.runs import code

pytestmark = pytest.mark.process

ADDS = code("""
    def process(a, b):
        return a + b
""")


def _children() -> set[int]:
    """This process's child processes (the engine's fork server, a worker)."""
    mine = str(os.getpid())
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == mine:
            found.add(int(stat.parent.name))
    return found


def _engine_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fluksio-local-engine"]


def test_a_script_runs_on_an_engine_of_its_own_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Temporary directories go under this test's own, so that another test's engine of
    # its own (on another xdist worker) is not taken for this one's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = _children()
    with local() as client:
        client.put_flow("add", [{"id": "add", "code": ADDS}])
        run = client.wait_run(client.start_run("add", {"a": 40, "b": 2}).id, timeout=60)
        assert (run.state, run.nodes[0].result) == ("succeeded", 42)
        url = client.base_url
        (data_dir,) = tmp_path.glob("fluksio-local-*")
        assert data_dir.is_dir()
    with pytest.raises(ClientError, match="cannot reach the engine"):
        Client(url).health()
    assert not data_dir.exists()
    assert _engine_threads() == []
    assert _children() <= before, "the engine's processes are gone"


def test_a_local_worker_takes_the_calls_that_require_it() -> None:
    before = _children()
    with local(worker_labels=["gpu"]) as client:
        assert _children() - before, "the worker runs"
        client.put_flow("on-gpu", [{"id": "n", "code": ADDS, "worker": "gpu"}])
        run = client.wait_run(client.start_run("on-gpu", {"a": 1, "b": 2}).id, timeout=60)
        node = run.nodes[0]
        assert (run.state, node.result) == ("succeeded", 3)
        assert node.provenance is not None and node.provenance.worker == "local-worker"
    assert _children() <= before, "the worker and the engine's processes are gone"
