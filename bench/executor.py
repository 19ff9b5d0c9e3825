"""The Python executor beside the REST floors it stands on (real engine, real worker).

One engine and one of our agents (``--parallel 4``) on 127.0.0.1, real processes:

* ``executor.map`` over N no-op items (one run of N nodes), calls per second, beside the
  same fan-out put and run over REST (``bench/remote_calls.py``'s): the client must not
  be the bottleneck; and the CPU the client's own process spent on it; then the same
  items with ``chunksize=100`` (a call per hundred items);
* ``executor.submit(noop, 1).result()``, one at a time, p50, beside a one-node run of
  the same function over REST (POST, then ``?wait=`` until it ends).

Run: ``.venv/bin/python bench/executor.py [--items N] [--runs N]``
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine, stop
from remote_calls import _start_agent, _wait_attached

from fluksio.client import Client
from fluksio.client.sending import node_code


def noop(x: int) -> int:
    return x


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(items: int, runs: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        agent = None
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "b", "labels": ["remote"]})
            agent = _start_agent(url, token["token"], 4)
            _wait_attached(api, "p4")
            client = Client(url)
            client.login("bench", "bench-password")
            code = node_code(noop).source
            nodes = [
                {
                    "id": f"n{i}",
                    "code": code,
                    "worker": "remote",
                    "params": {"args": [i], "kwargs": {}},
                }
                for i in range(items)
            ]
            api.call("PUT", "/flows/fanout", {"nodes": nodes})
            api.run_to_end("fanout")  # warm
            started = time.perf_counter()
            assert api.run_to_end("fanout")["state"] == "succeeded"
            results["REST fan-out (floor), calls/s"] = items / (time.perf_counter() - started)
            with client.executor(worker="remote") as executor:
                list(executor.map(noop, range(items)))  # warm: the flow put once
                cpu = _own_cpu()
                started = time.perf_counter()
                assert list(executor.map(noop, range(items))) == list(range(items))
                results["executor.map, calls/s"] = items / (time.perf_counter() - started)
                results["executor.map, client CPU ms per call"] = (_own_cpu() - cpu) * 1000 / items
                list(executor.map(noop, range(items), chunksize=100))  # warm its flow
                started = time.perf_counter()
                packed = list(executor.map(noop, range(items), chunksize=100))
                assert packed == list(range(items))
                results["executor.map chunksize=100, items/s"] = items / (
                    time.perf_counter() - started
                )
                api.call(
                    "PUT",
                    "/flows/one",
                    {"nodes": [{"id": "call", "code": code, "worker": "remote"}]},
                )
                rest, submitted = [], []
                for _ in range(runs + 10):
                    started = time.perf_counter()
                    run = api.call(
                        "POST", "/flows/one/runs", {"params": {"args": [1], "kwargs": {}}}
                    )
                    while run["state"] not in {"succeeded", "failed", "cancelled"}:
                        run = api.call("GET", f"/runs/{run['id']}?wait=30")
                    rest.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    assert executor.submit(noop, 1).result(timeout=60) == 1
                    submitted.append(time.perf_counter() - started)
            results["one-node run over REST (floor), p50 ms"] = statistics.median(rest[10:]) * 1000
            results["submit(...).result(), p50 ms"] = statistics.median(submitted[10:]) * 1000
        finally:
            stop(agent, engine)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    results = measure(args.items, args.runs)
    width = max(map(len, results))
    for name, value in results.items():
        print(f"{name:<{width}}  {value:10.2f}")
    floor, ours = results["REST fan-out (floor), calls/s"], results["executor.map, calls/s"]
    print(f"{'executor.map / REST fan-out':<{width}}  {ours / floor:10.2f}")
    rest, submit = (
        results["one-node run over REST (floor), p50 ms"],
        results["submit(...).result(), p50 ms"],
    )
    print(f"{'submit round trip / REST run':<{width}}  {submit / rest:10.2f}")


if __name__ == "__main__":
    main()
