"""Scheduler throughput: 1,000 workers and 10,000 queued requests, beside the naive baseline.

The naive baseline is :func:`fluksio.scheduler.reference.reference_plan`: the same rules
as a plain loop over every request and every place, recomputed from scratch for each
event. Both run in this process, in this run, on the same generated cluster and queue.

Run: ``.venv/bin/python bench/scheduler.py [--naive-events N] [--events N] [--seed N]``
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics
import time
from dataclasses import replace

from fluksio.scheduler import ENGINE_ID, CallRequest, Policy, Scheduler, Worker
from fluksio.scheduler.reference import reference_plan
from fluksio.scheduler.resources import Amounts
from fluksio.scheduler.scheduler import Plan, Snapshot
from fluksio.scheduler.state import Allocation

WORKERS = 1_000
REQUESTS = 10_000


def make_workers(rng: random.Random) -> list[Worker]:
    workers = [Worker(id=ENGINE_ID, name="engine", slots=8, cpus=8, ram_mb=32768)]
    for n in range(WORKERS):
        kind = rng.random()
        if kind < 0.6:
            cpus = rng.choice([16, 32, 64])
            worker = Worker(
                id=f"w{n}",
                name=f"cpu-{n}",
                labels=frozenset({"cpu"}),
                slots=rng.choice([4, 8, 16]),
                cpus=cpus,
                gpus=0,
                ram_mb=cpus * 4096,
            )
        elif kind < 0.9:
            labels = {"gpu", "cuda12"} if rng.random() < 0.5 else {"gpu"}
            worker = Worker(
                id=f"w{n}",
                name=f"gpu-{n}",
                labels=frozenset(labels),
                slots=rng.choice([2, 4, 8]),
                cpus=32,
                gpus=rng.choice([1, 4, 8]),
                ram_mb=262144,
            )
        else:
            worker = Worker(
                id=f"w{n}",
                name=f"pi-{n}",
                labels=frozenset({"arm"}),
                slots=rng.choice([1, 2]),
                cpus=4,
                gpus=None,
                ram_mb=None,
            )
        workers.append(worker)
    return workers


def make_request(rng: random.Random, request_id: str, queued_at: float) -> CallRequest:
    kind = rng.random()
    if kind < 0.5:
        return CallRequest(
            request_id,
            queued_at,
            label="cpu",
            cpus=rng.choice([1, 2, 4, 8]),
            ram_mb=rng.choice([None, 1024, 8192]),
        )
    if kind < 0.8:
        return CallRequest(
            request_id,
            queued_at,
            label=rng.choice(["gpu", "cuda12"]),
            gpus=rng.choice([1, 1, 2, 4]),
            cpus=rng.choice([None, 4]),
        )
    if kind < 0.9:
        return CallRequest(request_id, queued_at, label="arm", policy=Policy.PREFER)
    return CallRequest(request_id, queued_at, cpus=rng.choice([None, 1]))


def _apply(snapshot: Snapshot, plan: Plan) -> Snapshot:
    """The state after a plan: placed requests move from waiting to running."""
    placed = {p.request_id: p for p in plan.placements}
    running = list(snapshot.running)
    waiting = []
    for request in snapshot.waiting:
        placement = placed.get(request.id)
        if placement is None:
            waiting.append(request)
            continue
        taken = Amounts(placement.gpus, placement.cpus, placement.ram_mb, 1)
        running.append((request, Allocation(placement.worker_id, taken, placement.gpu_ids)))
    return replace(snapshot, running=tuple(running), waiting=tuple(waiting))


def _finish(snapshot: Snapshot, request_id: str) -> Snapshot:
    running = tuple(item for item in snapshot.running if item[0].id != request_id)
    return replace(snapshot, running=running)


def _fresh(workers: list[Worker], requests: list[CallRequest]) -> Scheduler:
    scheduler = Scheduler()
    for worker in workers:
        scheduler.add_worker(worker)
    for request in requests:
        scheduler.submit(request)
    return scheduler


def measure_passes(
    workers: list[Worker], requests: list[CallRequest], repeats: int
) -> tuple[float, float, int]:
    """Median seconds of a cold full pass and of a pass with nothing changed."""
    cold, warm = [], []
    placed = 0
    for _ in range(repeats):
        scheduler = _fresh(workers, requests)
        started = time.perf_counter()
        placed = len(scheduler.schedule().placements)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        scheduler.schedule()
        warm.append(time.perf_counter() - started)
    return statistics.median(cold), statistics.median(warm), placed


def measure_stream(scheduler: Scheduler, seed: int, events: int) -> tuple[float, float]:
    """Events and placements per second: one call finishes, one arrives, one pass."""
    rng = random.Random(seed)
    placements = 0
    # The calls placed, oldest first, kept here as the engine keeps them: copying the
    # scheduler's whole running set per event (4,600 entries) is not the scheduler's work.
    running = collections.deque(scheduler.running())
    started = time.perf_counter()
    for n in range(events):
        if running:
            scheduler.finish(running.popleft())
        scheduler.submit(make_request(rng, f"s{n}", float(REQUESTS + n)))
        placed = scheduler.schedule().placements
        running.extend(p.request_id for p in placed)
        placements += len(placed)
    elapsed = time.perf_counter() - started
    return events / elapsed, placements / elapsed


def measure_naive_stream(state: Snapshot, seed: int, events: int) -> tuple[float, float]:
    """The same stream, the plan recomputed from scratch by the reference each event."""
    rng = random.Random(seed)
    placements = 0
    started = time.perf_counter()
    for n in range(events):
        if state.running:
            state = _finish(state, state.running[0][0].id)
        arriving = make_request(rng, f"n{n}", float(REQUESTS + n))
        state = replace(state, waiting=(*state.waiting, arriving))
        plan = reference_plan(state)
        placements += len(plan.placements)
        state = _apply(state, plan)
    elapsed = time.perf_counter() - started
    return events / elapsed, placements / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--events", type=int, default=5_000)
    parser.add_argument("--naive-events", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    workers = make_workers(rng)
    requests = [make_request(rng, f"r{n}", float(n)) for n in range(REQUESTS)]

    cold, warm, placed = measure_passes(workers, requests, args.repeats)
    snapshot = _fresh(workers, requests).snapshot()
    started = time.perf_counter()
    naive_plan = reference_plan(snapshot)
    naive_cold = time.perf_counter() - started
    assert len(naive_plan.placements) == placed, "the baseline must agree"

    scheduler = _fresh(workers, requests)
    scheduler.schedule()
    events_rate, placement_rate = measure_stream(scheduler, args.seed + 1, args.events)
    naive_events, naive_placements = measure_naive_stream(
        _apply(snapshot, naive_plan), args.seed + 1, args.naive_events
    )

    print(f"{WORKERS} workers, {REQUESTS} queued requests; {placed} placed by the first pass")
    print(f"{'measure':44} {'ours':>10} {'naive':>10} {'ratio':>8}")
    print(
        f"{'full pass, cold (ms, median)':44} {cold * 1e3:10.1f} {naive_cold * 1e3:10.1f}"
        f" {naive_cold / cold:8.1f}"
    )
    print(f"{'pass with nothing changed (ms, median)':44} {warm * 1e3:10.2f}")
    print(
        f"{'event stream: events per second':44} {events_rate:10.0f} {naive_events:10.2f}"
        f" {events_rate / naive_events:8.0f}"
    )
    print(
        f"{'event stream: placements per second':44} {placement_rate:10.0f}"
        f" {naive_placements:10.2f} {placement_rate / max(naive_placements, 1e-9):8.0f}"
    )


if __name__ == "__main__":
    main()
