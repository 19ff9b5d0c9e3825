"""What deleting old runs in the background costs the calls that run meanwhile.

A real engine (``--keep-runs-s 1800 --prune-every-s 0.5``) is given ``--runs`` ended runs,
then a steady stream of calls (one node on the engine, each run to its end) is timed
twice: once with nothing to delete (the floor), once right after every stored run's end
was written an hour back in the engine's database (as an hour would age them), so that
the engine deletes them all, 100 to a transaction, while the calls run. The table gives
each pass's median and 99th percentile, their ratio to the floor, and how long the
deleting took.

Run: ``.venv/bin/python bench/retention.py [--runs 5000] [--calls 300]``
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine

NODE = "def process(n=0):\n    return n\n"


def _calls(api: Api, count: int) -> list[float]:
    took = []
    for _ in range(count):
        started = time.perf_counter()
        run = api.run_to_end("quick")
        took.append(time.perf_counter() - started)
        if run["state"] != "succeeded":
            raise RuntimeError(f"a call ended {run['state']}")
    return took


def _p99(samples: list[float]) -> float:
    return sorted(samples)[max(0, int(len(samples) * 0.99) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        data_dir = Path(root) / "data"
        engine, url = start_engine(
            data_dir, "auto", args=("--keep-runs-s", "1800", "--prune-every-s", "0.5")
        )
        try:
            api = Api.logged_in(url)
            api.call("PUT", "/flows/quick", {"nodes": [{"id": "n", "code": NODE}]})
            for _ in range(args.runs):
                api.call("POST", "/flows/quick/runs", {"params": {}})
            while api.call("GET", "/runs?state=queued&limit=1") or api.call(
                "GET", "/runs?state=running&limit=1"
            ):
                time.sleep(0.2)
            floor = _calls(api, args.calls)
            with sqlite3.connect(data_dir / "fluksio.sqlite3", timeout=30) as connection:
                connection.execute("UPDATE runs SET ended_at = ended_at - 3600")
            aged = time.perf_counter()
            pruning = _calls(api, args.calls)
            while len(api.call("GET", "/runs?limit=1000")) > 2 * args.calls:
                time.sleep(0.05)
            deleting_s = time.perf_counter() - aged
        finally:
            engine.terminate()
            engine.wait(timeout=30)
    print(f"{args.runs} ended runs deleted while {args.calls} calls ran, in {deleting_s:.1f} s")
    print(f"{'pass':28} {'median (ms)':>12} {'p99 (ms)':>10} {'median / floor':>15}")
    for name, took in (("nothing to delete (floor)", floor), ("while deleting", pruning)):
        median = statistics.median(took)
        print(
            f"{name:28} {median * 1000:12.2f} {_p99(took) * 1000:10.2f}"
            f" {median / statistics.median(floor):15.2f}"
        )


if __name__ == "__main__":
    main()
