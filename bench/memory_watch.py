"""What keeping calls to their memory costs: one read of a call's process tree, and a
no-op call with a bound beside one without, through the launcher (fork mode).

The floor in the same run: a bare ``python -c pass``. A watched call is read every
``MEMORY_EVERY_S``; its CPU per second is ten reads.

Run: ``.venv/bin/python bench/memory_watch.py [--calls N] [--reads N]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import RunFrame
from fluksio.agent.runner import tree_memory
from fluksio.agent.runner.processes import children_of
from fluksio.agent.stopping import LOOK_EVERY, MEMORY_EVERY_S

sys.path.insert(0, str(Path(__file__).parent))
from calls import python_pass_ms

NOOP = "def process():\n    return 1\n"


def _read_us(children: int, reads: int) -> float:
    """One read of a tree of one process with ``children`` below it, in microseconds."""
    sleeper = "[sys.executable, '-c', 'import time; time.sleep(60)']"
    below = f"import subprocess, sys\n[subprocess.Popen({sleeper}) for _ in range({children})]\n"
    root = subprocess.Popen([sys.executable, "-c", below + "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # bounded: until every child is there
            if len(children_of(root.pid) or []) >= children:
                break
            time.sleep(0.05)
        started = time.perf_counter()
        seen: dict[tuple[int, int], str] = {}
        for read in range(reads):  # as a watched call is read: its open files every third
            tree_memory(root.pid, 1 << 30, shm_seen=seen, look=read % LOOK_EVERY == 0)
        return (time.perf_counter() - started) / reads * 1e6
    finally:
        for child in children_of(root.pid) or []:  # ours, by pid
            os.kill(child, signal.SIGKILL)
        root.kill()
        root.wait()


async def _calls_ms(calls: int, ram_mb: int | None) -> float:
    launcher = Launcher(mode="fork")
    await launcher.start()
    try:
        spent = []
        for n in range(calls):
            spec = RunFrame(call_id=f"c{n}", source=NOOP, node="n", flow="f", ram_mb=ram_mb)
            started = time.perf_counter()
            outcome = await launcher.run(spec)
            spent.append(time.perf_counter() - started)
            assert outcome.ok, outcome
        return statistics.median(spent) * 1000
    finally:
        await launcher.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reads", type=int, default=2000)
    given = parser.parse_args()
    floor = python_pass_ms()
    rows: list[tuple[str, float, float | None]] = [("floor: python -c pass (ms)", floor, 1.0)]
    unbounded = asyncio.run(_calls_ms(given.calls, None))
    bounded = asyncio.run(_calls_ms(given.calls, 1000))
    rows.append(("no-op call, no bound, p50 (ms)", unbounded, unbounded / floor))
    rows.append(("no-op call, ram_mb bound, p50 (ms)", bounded, bounded / floor))
    for children in (0, 4, 16):
        read = _read_us(children, given.reads)
        per_s = read * (1 / MEMORY_EVERY_S) / 1e6 * 100
        rows.append((f"one read, {children} processes below (us)", read, read / 1000 / floor))
        rows.append((f"  a watched call's CPU, {children} below (% of a core)", per_s, None))
    print(f"{'measure':<52} {'value':>10} {'÷ floor':>9}")
    for name, value, ratio in rows:
        shown = f"{ratio:9.4f}" if ratio is not None else f"{'':>9}"
        print(f"{name:<52} {value:10.3f} {shown}")


if __name__ == "__main__":
    main()
