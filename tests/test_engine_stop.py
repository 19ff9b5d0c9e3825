"""A graceful stop (SIGTERM) ends within its stated bound whatever its clients do, and a
new engine on the same data directory waits for it instead of being refused (issue 64,
item 5). Real engine processes; a client long-polls a run while the engine stops."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fluksio.engine.holding import STOP_WITHIN_S
from tests.support.cli import fluksio
from tests.support.engine import free_port, start_engine
from tests.support.process import connected_to, long_poll
from tests.support.runs import code, node_of, run_flow, wait_run
from tests.support.wait import wait_for

pytestmark = pytest.mark.process


def _long_call(ledger: Path) -> str:
    return code(f"""
        import os, time
        def process():
            again = os.path.exists({str(ledger)!r})  # the first copy started: it is the rerun
            open({str(ledger)!r}, "a").write("start\\n")
            time.sleep(0 if again else 30)
            open({str(ledger)!r}, "a").write("end\\n")
            return "ran"
    """)


def test_a_stop_with_a_client_waiting_ends_within_its_bound_and_the_next_engine_waits_for_it(
    tmp_path: Path,
) -> None:
    # Before, the engine took 59 s to exit (aiohttp waited for the client's long poll), a
    # new engine was refused meanwhile ("pid ?"), and the call in the engine's process
    # ran to its end during the stop, then again in full after it (retry_on_restart).
    ledger = tmp_path / "ledger"
    port = free_port()
    engine = start_engine(tmp_path / "data", tmp_path / "logs1", port=port)
    second = None
    try:
        admin = engine.login()
        node = {"id": "n", "code": _long_call(ledger), "retry_on_restart": True}
        run_id = run_flow(engine, admin, "long", [node])
        wait_for(ledger.exists, timeout=30, what="the call to start in the engine")
        poller = long_poll(f"{engine.api}/runs/{run_id}?wait=60", admin)
        wait_for(
            lambda: connected_to(poller.pid, port),
            timeout=10,
            what="the client's long poll to be under way",
        )
        engine.process.send_signal(signal.SIGTERM)
        second = start_engine(
            tmp_path / "data", tmp_path / "logs2", port=port, timeout=STOP_WITHIN_S + 10
        )
        # The first let go (within its bound: start_engine's own wait is that and 10 s).
        assert engine.process.wait(timeout=1) == 0, engine.logs()[-2000:]
        poller.wait(timeout=10)  # answered, or cut, at the stop: not held to its 60 s
        admin = second.login()
        run = wait_run(second, admin, run_id, timeout=60)
        assert (run["state"], node_of(second, admin, run_id, "n")["attempt"]) == ("succeeded", 2)
        assert ledger.read_text().split() == ["start", "start", "end"], "the first never ended"
    finally:
        engine.stop()
        if second is not None:
            second.stop()


def test_a_second_engine_on_a_data_directory_in_use_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        refused = fluksio("serve", "--port", "0", "--data-dir", str(tmp_path / "data"))
        assert refused.returncode == 2, refused
        said = f"another engine (pid {engine.pid}) is already using the data directory"
        assert said in refused.stderr, refused.stderr
    finally:
        engine.stop()
