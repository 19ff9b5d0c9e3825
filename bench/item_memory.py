"""What an array of large items costs the engine: its memory per queued run, beside a floor.

A real engine (``fluksio serve``) is given an ``items_from`` artifact of ``--items`` lines
of ``--kib`` KiB each, and ``--runs`` runs of an array over it, bound to a label no worker
carries, so every item waits; then the runs are cancelled. The engine's resident memory
(``VmRSS``) is read idle, after each run has filled its line, and after the cancels. The
floor is a bare interpreter's (``python -c`` sleeping) in the same run. Before issue 65
a line held 1,024 items whatever their size: 226 MiB a run of 256-KiB items, and 597 MiB
kept after both runs were cancelled.

Run: ``.venv/bin/python bench/item_memory.py [--items 1100 --kib 256 --runs 2]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from arrays import rss_mb

from tests.support.engine import start_engine
from tests.support.runs import run_flow

NODE = "def process(x, pad):\n    return x\n"


def floor_mb() -> float:
    """A bare interpreter's resident memory (``VmRSS``, as the engine's is read)."""
    bare = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(3)"])
    try:
        time.sleep(1.0)
        return rss_mb(bare.pid)
    finally:
        bare.kill()
        bare.wait()


def settled_rss(pid: int, seconds: float = 3.0) -> float:
    """The engine's memory once it has taken in what it was given (the last of a few)."""
    time.sleep(seconds)
    return rss_mb(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1100)
    parser.add_argument("--kib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    floor = floor_mb()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        engine = start_engine(root / "data", root / "logs")
        try:
            admin = engine.login()
            client = engine.client(admin)
            pad = "p" * (args.kib * 1024 - 32)
            lines = "".join(json.dumps({"x": x, "pad": pad}) + "\n" for x in range(args.items))
            digest = client.request("PUT", "/artifacts", data=lines.encode()).body["digest"]
            node = {"id": "a", "code": NODE, "items_from": [digest], "worker": "nowhere"}
            rows = [("idle", settled_rss(engine.pid, 1.0))]
            runs = []
            for number in range(1, args.runs + 1):
                runs.append(run_flow(engine, admin, "large", [node]))
                rows.append((f"{number} run(s) in line", settled_rss(engine.pid)))
            for run_id in runs:
                client.request("POST", f"/runs/{run_id}/cancel")
            rows.append(("all cancelled", settled_rss(engine.pid)))
        finally:
            engine.stop()
    print(f"{args.items} items of {args.kib} KiB; floor (a bare python): {floor:.1f} MiB")
    print(f"{'engine':>20}  {'RSS (MiB)':>9}  {'x floor':>7}  {'over idle':>9}")
    for what, mib in rows:
        print(f"{what:>20}  {mib:9.1f}  {mib / floor:7.2f}  {mib - rows[0][1]:9.1f}")


if __name__ == "__main__":
    main()
