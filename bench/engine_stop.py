"""How long a graceful stop takes with a client waiting, beside a bare ``python -c pass``.

A real engine (``fluksio serve``) runs a call in its own process that sleeps a minute, and
a client holds a long poll on its run (``GET /runs/{id}?wait=60``, in a process of its
own). The engine is sent SIGTERM once the poll's connection is open; the time to its exit
is measured, ``--times`` times. Before issue 64 this was 59 s (aiohttp waited its default
60 s for the long poll); the engine now states a bound of 10 s.

Run: ``.venv/bin/python bench/engine_stop.py [--times 5]``
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import measure_floors

from fluksio.engine.holding import STOP_WITHIN_S
from tests.support.engine import start_engine
from tests.support.process import connected_to, long_poll
from tests.support.runs import run_flow
from tests.support.wait import wait_for

SLEEPS = "import time\n\ndef process():\n    time.sleep(60)\n"


def one_stop(root: Path) -> float:
    """Seconds from SIGTERM to the engine's exit, a client's long poll open."""
    engine = start_engine(root / "data", root / "logs")
    try:
        admin = engine.login()
        run_id = run_flow(engine, admin, "sleeps", [{"id": "n", "code": SLEEPS}])
        port = int(engine.url.rsplit(":", 1)[1])
        poller = long_poll(f"{engine.api}/runs/{run_id}?wait=60", admin)
        wait_for(lambda: connected_to(poller.pid, port), timeout=10, what="the long poll")
        started = time.perf_counter()
        engine.process.send_signal(signal.SIGTERM)
        engine.process.wait(timeout=120)
        took = time.perf_counter() - started
        poller.wait(timeout=10)
        return took
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--times", type=int, default=5)
    args = parser.parse_args()
    took = []
    for _ in range(args.times):
        with tempfile.TemporaryDirectory() as folder:
            took.append(one_stop(Path(folder)))
    floor = measure_floors(20)["spawn_p50"]
    median = statistics.median(took)
    print(f"{'measure':44} {'value':>12}")
    print(f"{'floor: python -c pass (p50)':44} {floor * 1000:>10.1f} ms")
    print(f"{'stop with a client waiting, median':44} {median:>11.2f} s")
    print(f"{'  fastest / slowest':44} {min(took):>5.2f} / {max(took):.2f} s")
    print(f"{'  median / floor':44} {median / floor:>11.0f} x")
    print(f"{'the stated bound':44} {STOP_WITHIN_S:>11.0f} s")


if __name__ == "__main__":
    main()
