"""Arrays at scale: what queueing 10k / 100k / 1M items costs the engine, and a map's
throughput by size and by ``chunksize``, beside a bare ``python -c pass`` measured in
the same run.

Queueing: a real engine (``fluksio serve``); the items as artifacts of JSON lines (one
per 50,000 items, as the executor sends them), an array node bound to a label no worker
carries, so that everything stays queued. For each size: the engine's RSS before and
after (``VmRSS``), its growth per item, the time from the run's POST to its answer (the
items counted and checked, the first window in line), and the time to a first call when
the same array may run on the engine itself.

Throughput: one of our agents with ``--parallel 2`` twice (two workers) and the Python
executor's ``map`` of a no-op, 1,000 items and ``--large`` items (items/s, end to end:
items sent, run, results read in order); then 2,000 items with ``chunksize`` 1 and 100.

Last, ``local()``: a million items in one ``map`` with ``chunksize=100``, the engine in
this process, results checked in order as they come; the time and this process's peak
RSS (engine and client together).

Run: ``.venv/bin/python bench/arrays.py [--sizes 10000,100000,1000000] [--large 20000]
[--local 1000000]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, measure_floors, start_engine, stop
from remote_calls import attached_agents

from fluksio.client import local
from fluksio.client.client import Client
from fluksio.client.executor import RemoteExecutor

PER_ARTIFACT = 50_000


def noop(x: int) -> int:
    return x


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def upload_items(api: Api, count: int) -> list[str]:
    digests = []
    for start in range(0, count, PER_ARTIFACT):
        lines = "".join(
            json.dumps({"args": [x], "kwargs": {}}) + "\n"
            for x in range(start, min(count, start + PER_ARTIFACT))
        )
        response, body = api.request(
            "PUT", "/artifacts", lines, {"Content-Type": "application/octet-stream"}
        )
        if response.status >= 400:
            raise RuntimeError(f"upload: {response.status} {body[:200]!r}")
        digests.append(json.loads(body)["digest"])
    return digests


def queue_sizes(sizes: list[int]) -> list[dict[str, float]]:
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as folder:
            engine, url = start_engine(Path(folder) / "data", "fork", args=("--engine-slots", "2"))
            try:
                api = Api.logged_in(url)
                digests = upload_items(api, size)
                code = "def process(args, kwargs):\n    return args[0]\n"
                parked = {"id": "sweep", "code": code, "items_from": digests, "worker": "none"}
                api.call("PUT", "/flows/parked", {"nodes": [parked]})
                here = {"id": "sweep", "code": code, "items_from": digests}
                api.call("PUT", "/flows/here", {"nodes": [here]})
                before = rss_mb(engine.pid)
                started = time.perf_counter()
                api.call("POST", "/flows/parked/runs", {"params": {}})
                queued_s = time.perf_counter() - started
                after = rss_mb(engine.pid)
                started = time.perf_counter()
                run = api.call("POST", "/flows/here/runs", {"params": {}})
                while True:
                    page = api.call("GET", f"/runs/{run['id']}/items?limit=1")
                    if page["items"][0]["started_at"] is not None:
                        break
                    time.sleep(0.005)
                first_s = time.perf_counter() - started
                api.call("POST", f"/runs/{run['id']}/cancel?wait=30")
            finally:
                stop(engine)
        rows.append(
            {
                "items": size,
                "rss_before_mb": before,
                "rss_after_mb": after,
                "bytes_per_item": (after - before) * 1024 * 1024 / size,
                "queued_s": queued_s,
                "first_call_s": first_s,
            }
        )
    return rows


@contextlib.contextmanager
def warm_executor(
    folder: str, args: tuple[str, ...] = ("--engine-slots", "0")
) -> Iterator[tuple[subprocess.Popen[bytes], RemoteExecutor]]:
    """An engine (started with ``args``) and two of our agents with ``--parallel 2``; the
    engine's process and an executor on them, warmed by a map of 200 no-ops."""
    engine, url = start_engine(Path(folder) / "data", "fork", args=args)
    agents = []
    try:
        api = Api.logged_in(url)
        agents = attached_agents(api, url, ("a", "b"), parallel=2)
        client = Client(url)
        client.login("bench", "bench-password")
        with client.executor(worker="remote") as executor:
            list(executor.map(noop, range(200)))  # warm: the flow's code, the workers
            yield engine, executor
    finally:
        stop(*agents, engine)


def throughput(large: int) -> list[tuple[str, float]]:
    with tempfile.TemporaryDirectory() as folder, warm_executor(folder) as (_, executor):
        rows = []
        for label, count, chunksize in (
            ("1,000 items", 1000, 1),
            (f"{large:,} items", large, 1),
            ("2,000 items, chunksize 1", 2000, 1),
            ("2,000 items, chunksize 100", 2000, 100),
        ):
            started = time.perf_counter()
            results = list(executor.map(noop, range(count), chunksize=chunksize))
            assert results == list(range(count))
            rows.append((label, count / (time.perf_counter() - started)))
        return rows


def square(x: int) -> int:
    return x * x


def local_map(count: int) -> tuple[float, float]:
    """Seconds for ``count`` items through ``local()``, and the peak RSS (MB)."""
    started = time.perf_counter()
    with local() as client, client.executor() as executor:
        for index, value in enumerate(executor.map(square, range(count), chunksize=100)):
            assert value == index * index
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return time.perf_counter() - started, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--large", type=int, default=20_000)
    parser.add_argument("--local", type=int, default=1_000_000)
    args = parser.parse_args()
    floors = measure_floors(20)
    print(f"floor: python -c pass {floors['spawn_p50'] * 1000:.1f} ms (p50), cpus {os.cpu_count()}")
    print()
    print(
        "| items queued | engine RSS before | after | per item | POST to answer | to a first call |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in queue_sizes([int(s) for s in args.sizes.split(",")]):
        print(
            f"| {row['items']:,} | {row['rss_before_mb']:.0f} MB | {row['rss_after_mb']:.0f} MB"
            f" | {row['bytes_per_item']:.1f} B | {row['queued_s']:.2f} s"
            f" ({row['queued_s'] / floors['spawn_p50']:.0f}x floor)"
            f" | {row['first_call_s']:.2f} s |"
        )
    print()
    print("| map on two workers (--parallel 2 each) | items/s |")
    print("|---|---:|")
    for label, rate in throughput(args.large):
        print(f"| {label} | {rate:,.0f} |")
    print()
    took, peak = local_map(args.local)
    print(
        f"local(): {args.local:,} items, chunksize 100, in {took:.1f} s"
        f" ({args.local / took:,.0f} items/s); peak RSS of engine and client {peak:.0f} MB"
    )


if __name__ == "__main__":
    main()
