"""``fluksio runs logs --follow`` against real processes: a worker's node's lines while it
runs, and a dropped connection resumed without a gap or a repeat."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path

from tests.support.cli import follow_logs
from tests.support.engine import EngineProcess
from tests.support.proxy import PausableProxy
from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.worker import start_worker

NODE = code(
    """
    import os, time

    def process(gates):
        def wait_for(name):
            while not os.path.exists(os.path.join(gates, name)):
                time.sleep(0.02)

        print("line 0", flush=True)
        wait_for("go1")
        for n in range(1, 200):
            print(f"line {n}", flush=True)
        wait_for("go2")
        for n in range(200, 400):
            print(f"line {n}")
        return "done"
    """
)


class _Lines:
    """What a process prints, line by line, read on a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        stdout = process.stdout
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: object) -> None:
        for line in stdout:  # type: ignore[attr-defined]
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, wanted: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {wanted!r} within {timeout} s; saw {self.seen[-5:]}"
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"the command ended before {wanted!r}; saw {self.seen[-5:]}"
            self.seen.append(line)

    def rest(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                return
            self.seen.append(line)


def test_follow_shows_a_running_nodes_first_line_and_resumes_after_a_drop(
    engine: EngineProcess, tmp_path: Path
) -> None:
    token = engine.login()
    minted = engine.mint(token, "box", ["cpu"])
    worker = start_worker(engine, minted["token"], tmp_path / "worker", "--labels", "cpu")
    gates = tmp_path / "gates"
    gates.mkdir()
    proxy = PausableProxy(int(engine.url.rsplit(":", 1)[1]))
    follower: subprocess.Popen[str] | None = None
    try:
        nodes = [{"id": "train", "worker": "cpu", "code": NODE, "params": {"gates": str(gates)}}]
        assert put_flow(engine, token, "talky", nodes)
        run_id = start_run(engine, token, "talky")["id"]
        follower = follow_logs(f"http://127.0.0.1:{proxy.port}/api/v1", token, run_id)
        lines = _Lines(follower)
        # The node is still running (it waits for go1): its first line is already shown.
        lines.until("line 0", timeout=60)
        (gates / "go1").touch()
        lines.until("line 199", timeout=30)
        proxy.cut()  # the follower's held request is cut; it asks again from where it was
        (gates / "go2").touch()
        lines.rest(timeout=60)
        assert follower.wait(timeout=10) == 0, follower.stderr.read() if follower.stderr else ""
        assert lines.seen == [f"line {n}" for n in range(400)], "no line missing, none twice"
        assert wait_run(engine, token, run_id)["state"] == "succeeded"
    finally:
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait(timeout=10)
        proxy.close()
        worker.stop()
