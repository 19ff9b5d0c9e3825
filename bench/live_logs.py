"""What a node that floods its output costs, and how soon ``runs logs --follow`` shows it.

A real engine and a real ``fluksio-worker`` on 127.0.0.1. A *loud* node prints 10,000
lines a second (100 every 10 ms) for ``--seconds``; a *flood* prints as fast as it can
for as long (the rate bound drops what is over it); a *quiet* node sleeps as long and
prints nothing: the floor the others are measured against, in the same run. Each runs
on the engine and on the worker. Both first sleep 2 s, so that a follower
(``fluksio runs logs RUN --follow``, started when the run is) is waiting when the node
prints its first line, which carries the time it was printed: the *first line* column is
how long it took to reach the follower's output.

Per call: the engine process's own CPU seconds (not its calls' processes), and the growth
of its peak resident memory (``VmHWM``, reset before the call). Lines: how many the
follower printed, of those the node wrote (the rest were passed over by the rate bound,
each gap said in one line by the follower).

Run: ``.venv/bin/python bench/live_logs.py [--seconds 10]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import BIN, Api, process_cpu_seconds, start_engine, start_worker, stop

LOUD = """
import time

def process(seconds):
    time.sleep(2)
    print(f"first {time.time()}", flush=True)
    for tick in range(int(seconds * 100)):
        for n in range(100):
            print(f"line {tick * 100 + n} of a node that talks a lot", flush=False)
        time.sleep(0.01)
    return "done"
"""

FLOOD = """
import time

def process(seconds):
    time.sleep(2)
    print(f"first {time.time()}", flush=True)
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        for _ in range(1000):
            print(f"line {n} of a node that floods its output")
            n += 1
    return n
"""

QUIET = """
import time

def process(seconds):
    time.sleep(2)
    print(f"first {time.time()}", flush=True)
    time.sleep(seconds)
    return "done"
"""


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


class _Follower:
    """``fluksio runs logs RUN --follow``, its lines counted, its first line timed."""

    def __init__(self, url: str, token: str, run_id: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
        env.update(FLUKSIO_URL=f"{url}/api/v1", FLUKSIO_TOKEN=token)
        self.process = subprocess.Popen(
            [str(BIN / "fluksio"), "runs", "logs", run_id, "--follow"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.first_s: float | None = None
        self.lines = 0
        self.gaps = 0
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("first ") and self.first_s is None:
                self.first_s = time.time() - float(line.split()[1])
            elif line.startswith("[... "):
                self.gaps += 1
            else:
                self.lines += 1

    def wait(self) -> None:
        self.process.wait(timeout=120)
        self._thread.join(timeout=10)


def measure(api: Api, url: str, engine_pid: int, flow: str, seconds: float) -> dict[str, float]:
    Path(f"/proc/{engine_pid}/clear_refs").write_text("5")  # the peak, from now
    before_kb = _status_kb(engine_pid, "VmHWM")
    cpu_before = process_cpu_seconds(engine_pid)
    run = api.call("POST", f"/flows/{flow}/runs", {"params": {"seconds": seconds}})
    follower = _Follower(url, str(api.token), run["id"])
    while run["state"] not in {"succeeded", "failed", "cancelled"}:
        run = api.call("GET", f"/runs/{run['id']}?wait=30")
    follower.wait()
    if run["state"] != "succeeded":
        raise RuntimeError(f"{flow} ended {run['state']}")
    result = run["nodes"][0]["result"]
    return {
        "result": result if isinstance(result, int) else 0,
        "first_ms": (follower.first_s or float("nan")) * 1000,
        "cpu_s": process_cpu_seconds(engine_pid) - cpu_before,
        "peak_mib": (_status_kb(engine_pid, "VmHWM") - before_kb) / 1024,
        "shown": follower.lines,
        "gaps": follower.gaps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    seconds = parser.parse_args().seconds
    written = int(seconds * 100) * 100
    with tempfile.TemporaryDirectory() as root:
        engine, url = start_engine(Path(root) / "data", "auto")
        worker = None
        try:
            api = Api.logged_in(url)
            worker = start_worker(api, url, "box")
            for name, code in (("loud", LOUD), ("flood", FLOOD), ("quiet", QUIET)):
                for place, label in (("engine", None), ("worker", "box")):
                    node = {"id": "n", "code": code, "worker": label}
                    api.call("PUT", f"/flows/{name}-{place}", {"nodes": [node]})
            print(
                f"{'place':7} {'node':6} {'first line (ms)':>16} {'engine CPU (s)':>15}"
                f" {'peak RSS growth (MiB)':>22} {'lines shown':>12} {'of':>8} {'gaps':>5}"
            )
            for place in ("engine", "worker"):
                for name in ("quiet", "loud", "flood"):
                    row = measure(api, url, engine.pid, f"{name}-{place}", seconds)
                    total = {"loud": written, "flood": int(row["result"])}.get(name, 0)
                    print(
                        f"{place:7} {name:6} {row['first_ms']:16.0f} {row['cpu_s']:15.2f}"
                        f" {row['peak_mib']:22.1f} {row['shown']:12.0f} {total:8d}"
                        f" {row['gaps']:5.0f}"
                    )
        finally:
            stop(worker, engine)


if __name__ == "__main__":
    main()
