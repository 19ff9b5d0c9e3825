"""What cancelling most of a large array's unread items costs the engine, beside a floor.

A real engine (``fluksio serve``) runs an array of ``--items`` items bound to a label no
worker carries; all but the first 2% are cancelled, 10,000 positions a request (the most
one may name), while ``GET /health`` is asked between requests. Printed: the engine's
memory (``VmRSS``) before and after, per cancelled position, and the p50/p95 of
``/health`` meanwhile, beside a bare interpreter's ``VmRSS`` and a ``/health`` of the idle
engine in the same run. Before issue 65 each position was held (75 bytes) and written as a
row: ``/health`` p95 181 ms while 980,000 of a million were cancelled.

Run: ``.venv/bin/python bench/cancel_ranges.py [--items 1000000]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from arrays import rss_mb
from item_memory import floor_mb

from tests.support.engine import start_engine
from tests.support.runs import run_flow

NODE = "def process(x):\n    return x\n"
PER_REQUEST = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1_000_000)
    args = parser.parse_args()
    floor = floor_mb()
    with tempfile.TemporaryDirectory() as folder:
        engine = start_engine(Path(folder) / "data", Path(folder) / "logs")
        try:
            admin = engine.login()
            client = engine.client(admin)

            def health_ms() -> float:
                started = time.perf_counter()
                client.request("GET", "/health")
                return (time.perf_counter() - started) * 1e3

            idle = [health_ms() for _ in range(50)]
            data = "".join(f'{{"x": {x}}}\n' for x in range(args.items)).encode()
            digest = client.request("PUT", "/artifacts", data=data).body["digest"]
            node = {"id": "a", "code": NODE, "items_from": [digest], "worker": "nowhere"}
            run_id = run_flow(engine, admin, "many", [node])
            time.sleep(2)
            before = rss_mb(engine.pid)
            kept = args.items // 50
            during = []
            for low in range(kept, args.items, PER_REQUEST):
                body = {"items": list(range(low, min(low + PER_REQUEST, args.items)))}
                client.request("POST", f"/runs/{run_id}/items/cancel", json_body=body)
                during.append(health_ms())
            time.sleep(2)
            after = rss_mb(engine.pid)
        finally:
            engine.stop()
    cancelled = args.items - kept
    per_position = (after - before) * (1 << 20) / cancelled
    print(f"{cancelled:,} of {args.items:,} unread items cancelled; floor {floor:.1f} MiB")
    print(
        f"engine VmRSS before {before:.1f} MiB, after {after:.1f} MiB"
        f" ({after / floor:.2f}x floor): {per_position:.1f} bytes a position"
    )
    p = statistics.quantiles
    print(
        f"/health idle p50 {statistics.median(idle):.1f} ms, p95 {p(idle, n=20)[18]:.1f} ms;"
        f" while cancelling p50 {statistics.median(during):.1f} ms,"
        f" p95 {p(during, n=20)[18]:.1f} ms"
    )


if __name__ == "__main__":
    main()
