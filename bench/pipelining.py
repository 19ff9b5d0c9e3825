"""A fan-out of quick calls to one worker behind a long link, with and without calls
taken ahead (``--pipeline``).

One engine and one of our agents on 127.0.0.1 (real processes); the agent dials through
:class:`forwarder.DelayForwarder`, which holds every chunk half the round trip each way
(and, with ``--mbit``, caps the bandwidth). A flow of ``--calls`` nodes that each sleep
1 ms is run on it at ``--parallel`` 1 and 4, with round trips of 0, 10 and 50 ms, and
``--pipeline 0`` beside the default (twice ``--parallel``). The floor, per row: the calls'
own run time at that parallelism plus one round trip.

Run: ``.venv/bin/python bench/pipelining.py [--calls N] [--repeat N] [--mbit M]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, agent, start_engine, stop
from forwarder import DelayForwarder

QUICK = "import time\n\ndef process():\n    time.sleep(0.001)\n    return 1\n"
CALL_S = 0.001


def _agent(url: str, token: str, parallel: int, pipeline: int | None) -> subprocess.Popen[bytes]:
    ahead = [] if pipeline is None else ["--pipeline", str(pipeline)]
    options = ["--labels", "far", "--name", "far", "--parallel", str(parallel), *ahead]
    return agent(url, token, *options)


def _attached(api: Api) -> None:
    deadline = time.monotonic() + 30
    while not api.call("GET", "/workers"):
        if time.monotonic() > deadline:
            raise RuntimeError("the agent did not attach")
        time.sleep(0.05)


def _fan_out(api: Api, repeat: int) -> float:
    """The median wall time of ``repeat`` runs of the fan-out, after one to warm up."""
    api.run_to_end("fanout")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        assert api.run_to_end("fanout")["state"] == "succeeded"
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mbit", type=float, default=None, help="cap each way, Mbit/s")
    parser.add_argument(
        "--also", type=int, action="append", default=[], help="another --pipeline to measure"
    )
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "far", "labels": ["far"]})
            nodes = [{"id": f"n{i}", "code": QUICK, "worker": "far"} for i in range(args.calls)]
            api.call("PUT", "/flows/fanout", {"nodes": nodes})
            port = urlsplit(url).port or 80
            for rtt_ms in (0, 10, 50):
                forwarder = DelayForwarder(port, rtt_ms / 2, args.mbit)
                try:
                    for parallel in (1, 4):
                        floor = args.calls * CALL_S / parallel + rtt_ms / 1000
                        for pipeline in (0, None, *args.also):
                            agent = _agent(
                                f"http://127.0.0.1:{forwarder.port}",
                                token["token"],
                                parallel,
                                pipeline,
                            )
                            try:
                                _attached(api)
                                took = _fan_out(api, args.repeat)
                            finally:
                                stop(agent)
                                _detached(api)
                            ahead = (
                                f"{2 * parallel} (default)" if pipeline is None else str(pipeline)
                            )
                            rows.append((rtt_ms, parallel, ahead, took, floor))
                finally:
                    forwarder.close()
        finally:
            stop(engine)
    print(f"{args.calls} calls of 1 ms each, one worker, median of {args.repeat} runs")
    print("| round trip | --parallel | --pipeline | wall (s) | floor (s) | wall / floor |")
    print("|---:|---:|---|---:|---:|---:|")
    for rtt_ms, parallel, ahead, took, floor in rows:
        ratio = took / floor
        print(f"| {rtt_ms} ms | {parallel} | {ahead} | {took:.2f} | {floor:.2f} | {ratio:.1f} |")


def _detached(api: Api) -> None:
    deadline = time.monotonic() + 30
    while api.call("GET", "/workers"):
        if time.monotonic() > deadline:
            raise RuntimeError("the agent did not detach")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
