"""The engine's own CPU per call of a fan-out: N nodes of a flow (as a ``map`` was sent
before arrays) against one array node of N items, beside a bare fork's CPU measured in
the same run (issue 49, part 5: at most 2x the fork).

One engine and one of our agents at ``--parallel 2`` on 127.0.0.1, real processes; each
fan-out is put, started and run to its end, and the engine process's own CPU over the
whole (its threads' ``schedstat``; the fork server and the calls are its children, not
counted) is divided by N: the submission and the flow's put included. Each round
measures the floor (a bare fork's CPU, ``bench/calls.py``) and then each shape, and a
ratio is taken within its round: this machine's pace drifts by a third between minutes.

``--base PATH``: a checkout of another build (``git worktree add PATH REV``); its engine
and agent run beside this build's (their ``fluksio`` taken from PATH), the rounds
alternating between the two, so that before and after are measured in the same minutes.

Run: ``.venv/bin/python bench/array_cpu.py [--calls 2000] [--rounds 3] [--base PATH]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
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


SHAPES = (("nodes", "a node per call"), ("array", "one array, an item per call"))


@contextlib.contextmanager
def _build(name: str, checkout: Path | None, folder: Path) -> Iterator[tuple[Api, int]]:
    """An engine and an agent of a build: this one, or the one checked out at ``checkout``
    (its ``fluksio`` first on their ``PYTHONPATH``)."""
    engine, agent = None, None
    saved = dict(os.environ)
    try:
        if checkout is not None:
            os.environ["PYTHONPATH"] = str(checkout)
        try:
            engine, url = start_engine(folder / name, "fork", args=("--engine-slots", "0"))
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "p2", "labels": ["remote"]})
            agent = _start_agent(url, token["token"], 2)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        _wait_attached(api, "p2")
        one_round(api, engine.pid, 200, "array", 0)  # warm: imports, the worker
        yield api, engine.pid
    finally:
        stop(agent, engine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", type=Path, help="a checkout of the build to compare with")
    args = parser.parse_args()
    python = os.path.realpath(sys.base_prefix + "/bin/python3")
    builds = {"this": None} if args.base is None else {"base": args.base, "this": None}
    per: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    fork: list[float] = []
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        running = {
            name: stack.enter_context(_build(name, checkout, Path(folder)))
            for name, checkout in builds.items()
        }
        for number in range(1, args.rounds + 1):
            fork.append(bare_fork_cpu(python, FORKS_FOR_CPU))
            for name, (api, pid) in running.items():
                for shape, _label in SHAPES:
                    per[name, shape].append(one_round(api, pid, args.calls, shape, number))
                    time.sleep(0.5)  # let the feed's and the writer's tails settle
    fork_us = statistics.median(fork) * 1e6
    print(f"fork floor: {fork_us:.0f} us of CPU per fork + exit + wait (median of the rounds')")
    print()
    print(
        f"| fan-out of {args.calls:,} no-op calls, one agent --parallel 2 | build"
        " | engine CPU per call | x fork (median of each round's ratio) |"
    )
    print("|---|---|---:|---:|")
    for shape, label in SHAPES:
        for name in builds:
            samples = per[name, shape]
            us = statistics.median(samples) * 1e6
            ratio = statistics.median(c / f for c, f in zip(samples, fork, strict=True))
            print(f"| {label} | {name} | {us:.0f} us | {ratio:.2f} |")


if __name__ == "__main__":
    main()
