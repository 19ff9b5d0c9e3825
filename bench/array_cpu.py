"""The engine's own CPU per call of a fan-out: N nodes of a flow (as a ``map`` was sent
before arrays) against one array node of N items, beside a bare fork's CPU measured in
the same run (issue 49, part 5: at most 2x the fork).

One engine and one of our agents at ``--parallel 2`` on 127.0.0.1, real processes; each
fan-out is put, started and run to its end, and the engine process's own CPU over the
whole (its threads' ``schedstat``; the fork server and the calls are its children, not
counted) is divided by N: the submission and the flow's put included. Rounds alternate
the two shapes, so that a noisy machine's drift falls on both.

Run: ``.venv/bin/python bench/array_cpu.py [--calls 2000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import FORKS_FOR_CPU, Api, bare_fork_cpu, process_cpu_seconds, start_engine, stop
from remote_calls import _start_agent, _wait_attached

ARGS = "def process(x):\n    return x\n"


def run_to_end(api: Api, flow: str) -> None:
    run = api.call("POST", f"/flows/{flow}/runs", {"params": {}})
    while run["state"] not in {"succeeded", "failed", "cancelled"}:
        run = api.call("GET", f"/runs/{run['id']}?wait=30")
    if run["state"] != "succeeded":
        raise RuntimeError(f"run {run['id']} {run['state']}")


def one_round(api: Api, pid: int, calls: int, shape: str, number: int) -> float:
    """Engine CPU seconds per call of one fan-out of ``shape``, its put included."""
    flow = f"{shape}{number}"
    nodes: list[dict[str, object]]
    if shape == "nodes":
        nodes = [
            {"id": f"n{i}", "code": ARGS, "params": {"x": i}, "worker": "remote"}
            for i in range(calls)
        ]
    else:
        items = [{"x": i} for i in range(calls)]
        nodes = [{"id": "sweep", "code": ARGS, "items": items, "worker": "remote"}]
    before = process_cpu_seconds(pid)
    api.call("PUT", f"/flows/{flow}", {"nodes": nodes})
    run_to_end(api, flow)
    return (process_cpu_seconds(pid) - before) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    python = os.path.realpath(sys.base_prefix + "/bin/python3")
    per: dict[str, list[float]] = {"nodes": [], "array": [], "fork": []}
    with tempfile.TemporaryDirectory() as folder:
        engine, url = start_engine(Path(folder) / "data", "fork", args=("--engine-slots", "0"))
        agent = None
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "p2", "labels": ["remote"]})
            agent = _start_agent(url, token["token"], 2)
            _wait_attached(api, "p2")
            one_round(api, engine.pid, 200, "array", 0)  # warm: imports, the worker
            for number in range(1, args.rounds + 1):
                # The floor in each round, beside the two shapes: the machine's pace
                # drifts by a third between minutes here, and a ratio is taken per round.
                per["fork"].append(bare_fork_cpu(python, FORKS_FOR_CPU))
                for shape in ("nodes", "array"):
                    per[shape].append(one_round(api, engine.pid, args.calls, shape, number))
                    time.sleep(0.5)  # let the feed's and the writer's tails settle
        finally:
            stop(agent, engine)
    fork_us = statistics.median(per["fork"]) * 1e6
    print(f"fork floor: {fork_us:.0f} us of CPU per fork + exit + wait (median of the rounds')")
    print()
    print(
        f"| fan-out of {args.calls:,} no-op calls, one agent --parallel 2 | engine CPU per call"
        " | x fork (median of each round's ratio) |"
    )
    print("|---|---:|---:|")
    for shape, label in (("nodes", "a node per call"), ("array", "one array, an item per call")):
        us = statistics.median(per[shape]) * 1e6
        ratio = statistics.median(c / f for c, f in zip(per[shape], per["fork"], strict=True))
        print(f"| {label} | {us:.0f} us | {ratio:.2f} |")


if __name__ == "__main__":
    main()
