"""The engine on PostgreSQL beside the engine on SQLite, in the same run, rounds
alternating: a durable fan-out (the Python executor's ``map`` of a no-op over two of our
agents with ``--parallel 2``, every item's row written before its answer is told) in
items/s end to end, and the engine process's CPU seconds per item; beside the floor
measured in the same run (a bare fork, ``python -c pass``).

PostgreSQL is the local cluster ``make postgres-up`` brings up: a database of the
bench's own is made and dropped each round.

Run: ``.venv/bin/python bench/postgres.py [--items 5000] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from arrays import noop, warm_executor
from calls import measure_floors, process_cpu_seconds

from tests.support.postgres import fresh_database, local_postgres


def fan_out(items: int, database: str | None) -> tuple[float, float]:
    """Items/s and engine CPU ms per item of one map, on SQLite or on ``database``."""
    with tempfile.TemporaryDirectory() as folder:
        args: tuple[str, ...] = ("--engine-slots", "0")
        if database is not None:
            key = Path(folder) / "engine.key"
            key.write_text(secrets.token_urlsafe(32))
            args += ("--database", database, "--database-key-file", str(key))
        with warm_executor(folder, args) as (engine, executor):
            cpu_before = process_cpu_seconds(engine.pid)
            started = time.perf_counter()
            assert list(executor.map(noop, range(items))) == list(range(items))
            elapsed = time.perf_counter() - started
            cpu_ms = (process_cpu_seconds(engine.pid) - cpu_before) * 1000 / items
            return items / elapsed, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cluster = local_postgres()
    os.environ["PGPASSFILE"] = cluster.passfile
    rows: dict[str, list[tuple[float, float]]] = {"sqlite": [], "postgres": []}
    for _ in range(args.rounds):
        rows["sqlite"].append(fan_out(args.items, None))
        with fresh_database(cluster) as url:
            rows["postgres"].append(fan_out(args.items, url))
    floors = measure_floors(200)
    print(f"{'store':<10} {'items/s (each round)':<28} {'engine CPU ms/item':<24}")
    for store, found in rows.items():
        rates = ", ".join(f"{rate:,.0f}" for rate, _ in found)
        cpus = ", ".join(f"{cpu:.3f}" for _, cpu in found)
        print(f"{store:<10} {rates:<28} {cpus:<24}")
    sqlite_cpu = min(cpu for _, cpu in rows["sqlite"])
    postgres_cpu = min(cpu for _, cpu in rows["postgres"])
    print(
        f"engine CPU per item, PostgreSQL / SQLite (best of each): {postgres_cpu / sqlite_cpu:.2f}"
    )
    print("floors:", ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in floors.items()))


if __name__ == "__main__":
    main()
