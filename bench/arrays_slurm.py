"""The issue's end: a million items in one ``map`` with ``chunksize=100``, against an
engine whose only capacity is the local Slurm (the test cluster, ``make
slurm-for-tests``): ``client.executor(worker="hpc").map(f, range(1_000_000),
chunksize=100)``, results checked in order as they come.

Printed: the time, the items a second, how many Slurm jobs ran them, the engine's peak
RSS (``VmHWM``) and this client's; beside the floor, ``python -c pass``.

Run: ``.venv/bin/python bench/arrays_slurm.py [--items 1000000] [--workers 2]``
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from calls import measure_floors

from fluksio.client import Client
from tests.support.engine import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    free_port,
    start_engine,
    write_provisioners,
)
from tests.support.slurm import local_slurm, slurm_provisioner


def square(x: int) -> int:
    return x * x


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    floor = measure_floors(10)["spawn_p50"]
    slurm = local_slurm()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        port = free_port()
        profile = {"max_workers": args.workers}
        write_provisioners(root / "data", [slurm_provisioner(slurm, port, profile=profile)])
        engine = start_engine(root / "data", root / "logs", port=port)
        try:
            client = Client(engine.url)
            client.login(SUPERUSER, SUPERUSER_PASSWORD)
            started = time.perf_counter()
            with client.executor(worker="hpc", limit=600) as executor:
                results = executor.map(square, range(args.items), chunksize=100)
                for index, value in enumerate(results):
                    if value != index * index:
                        raise AssertionError(f"item {index}: {value}")
            took = time.perf_counter() - started
            run = client.runs()[0]
            jobs: set[str] = set()
            after: int | None = -1
            while after is not None:
                page = client.items(run.id, after=after, limit=10_000)
                jobs |= {i.provenance.slurm_job_id or "" for i in page.items if i.provenance}
                after = page.next
            engine_peak = peak_rss_mb(engine.process.pid)
        finally:
            engine.stop()
            slurm.cancel_leftovers(root)
    client_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"floor: python -c pass {floor * 1000:.1f} ms (p50)")
    print()
    print("| items | chunksize | Slurm jobs | time | items/s | engine peak RSS | client peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.items:,} | 100 | {len(jobs)} | {took:.1f} s ({took / floor:,.0f}x floor)"
        f" | {args.items / took:,.0f} | {engine_peak:.0f} MB | {client_peak:.0f} MB |"
    )


if __name__ == "__main__":
    main()
