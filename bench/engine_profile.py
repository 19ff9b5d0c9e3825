"""Where the engine's own time goes per call of a fan-out, beside a bare fork's CPU.

A real engine under ``cProfile`` and one of our agents (``--parallel 2``) on 127.0.0.1;
a flow of N no-op nodes on the worker (an executor's ``map`` as it is sent today), put
and run once to its end; then the same with 50 nodes in a fresh engine, so that the
difference of the two, over the difference of their calls, is what a call costs (the
start-up falls out). The profile's internal time (``tottime``), less the event loop's
idle wait (``epoll``), is grouped by where it is spent: SQLite, JSON, pydantic, sockets,
aiohttp, the asyncio loop, compiling node code, each part of fluksio, the rest. Each
group is shown in microseconds per call (the flow's put included) and as a share. The
floor, measured in the same run: the CPU of a bare ``fork`` + exit + wait from a small
``python -I -S`` (``bench/calls.py``'s).

``cProfile`` itself costs: the absolute figures are inflated; the shares say where to
look first (issue 49: the engine's cost per call, a third of today's).

Run: ``.venv/bin/python bench/engine_profile.py [--calls 2000]``
"""

from __future__ import annotations

import argparse
import collections
import pstats
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, measure_floors, start_engine
from remote_calls import _start_agent, _wait_attached

from fluksio.client.sending import node_code

GROUPS = (
    ("builtins.compile", "compiling node code"),
    ("sqlite3", "SQLite"),
    ("json/", "JSON (standard library)"),
    ("pydantic", "pydantic"),
    ("_socket", "sockets"),
    ("aiohttp", "aiohttp"),
    ("asyncio", "asyncio loop"),
    ("fluksio/scheduler", "fluksio: scheduler"),
    ("fluksio/engine/runs", "fluksio: runs (machine, writer, store)"),
    ("fluksio/engine/workers", "fluksio: worker sessions"),
    ("fluksio/engine", "fluksio: engine, other"),
    ("fluksio/api", "fluksio: HTTP layer and feed"),
    ("fluksio/agent", "fluksio: frames (shared with the agent)"),
    ("prometheus", "prometheus-client"),
    ("structlog", "structlog"),
)
IDLE = ("select.epoll", "poll")
SHORT = 50


def noop(x: int) -> int:
    return x


def _group(where: tuple[str, int, str]) -> str | None:
    file, _line, function = where
    text = f"{file}:{function}"
    if all(part in text for part in IDLE):
        return None  # the loop waiting for work: not the engine's time
    for needle, name in GROUPS:
        if needle in text:
            return name
    return "other (the rest of Python, compile, marshal)"


def profile(calls: int, array: bool = False, top: int = 0) -> dict[str, float]:
    """Seconds of the engine's own time per group, start to stop, running ``calls``
    (as nodes, or as one array's items); ``top``: print that many functions first."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "engine.prof"
        engine, url = start_engine(Path(tmp) / "data", "auto", profile=saved)
        agent = None
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "b", "labels": ["remote"]})
            agent = _start_agent(url, token["token"], 2)
            _wait_attached(api, "p2")
            code = node_code(noop).source
            nodes: list[dict[str, object]] = [
                {"id": f"n{i}", "code": code, "worker": "remote",
                 "params": {"args": [i], "kwargs": {}}}
                for i in range(calls)
            ]  # fmt: skip
            if array:
                items = [{"args": [i], "kwargs": {}} for i in range(calls)]
                nodes = [{"id": "sweep", "code": code, "worker": "remote", "items": items}]
            api.call("PUT", "/flows/fanout", {"nodes": nodes})
            assert api.run_to_end("fanout")["state"] == "succeeded"
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=30)
            engine.send_signal(signal.SIGINT)  # cProfile writes its file as it exits
            engine.wait(timeout=60)
        stats = pstats.Stats(str(saved))
        if top:
            stats.sort_stats("tottime").print_stats(top)
    spent: collections.Counter[str] = collections.Counter()
    for where, (_calls, _primitive, own, _cumulative, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        group = _group(where)
        if group is not None:
            spent[group] += own
    return dict(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--array", action="store_true", help="one array of N items")
    parser.add_argument("--top", type=int, default=0, help="print the N costliest functions")
    args = parser.parse_args()
    calls = args.calls
    fork_cpu = measure_floors(20)["fork_cpu"]
    long, short = profile(calls, args.array, args.top), profile(SHORT, args.array)
    per_call = {
        name: (long[name] - short.get(name, 0.0)) / (calls - SHORT)
        for name in sorted(long, key=lambda n: short.get(n, 0.0) - long[n])
    }
    total = sum(per_call.values())
    print(f"{'where':42} {'us/call':>9} {'share':>7} {'x fork':>7}")
    for name, seconds in per_call.items():
        share = seconds / total
        print(f"{name:42} {seconds * 1e6:9.1f} {share:7.1%} {seconds / fork_cpu:7.2f}")
    print(f"{'all of it (under cProfile)':42} {total * 1e6:9.1f} {1:7.1%} {total / fork_cpu:7.2f}")
    print(f"{'floor: CPU of a bare fork':42} {fork_cpu * 1e6:9.1f} {'':7} {1:7.2f}")


if __name__ == "__main__":
    main()
