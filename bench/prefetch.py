"""Inputs fetched while the call before runs: calls that each read an artifact and then
compute, on one far worker, with and without calls taken ahead.

One engine and one of our agents on 127.0.0.1 (real processes); the agent, and its
calls' artifact transfers, cross :class:`forwarder.DelayForwarder` (``--rtt-ms`` round
trip, ``--mbit`` each way), with a cache of its own and no shared store, ``--parallel 1``.
``--calls`` calls each read a different input of ``--mb`` MB, then compute for
``--compute-s``. Without calls taken ahead each call fetches, then computes, in turn; with
them, the next call's input comes while this one computes. The floor: the larger of all
the fetching and all the computing, plus one round trip.

Run: ``.venv/bin/python bench/prefetch.py [--calls N] [--mb M] [--mbit B]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, agent, start_engine, stop
from forwarder import DelayForwarder

READS_THEN_COMPUTES = (
    "import time\nimport fluksio\n\n"
    "def process(weights, compute_s):\n"
    "    with open(fluksio.load_artifact(weights), 'rb') as data:\n"
    "        size = len(data.read())\n"
    "    time.sleep(compute_s)\n"
    "    return size\n"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--mb", type=int, default=8)
    parser.add_argument("--mbit", type=float, default=200.0)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--compute-s", type=float, default=0.3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        forwarder = DelayForwarder(urlsplit(url).port or 80, args.rtt_ms / 2, args.mbit)
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "far", "labels": ["far"]})
            for pipeline in ("0", "2"):
                # New inputs for each: nothing is in any cache yet.
                nodes = []
                for n in range(args.calls):
                    data = bytes([n]) * (args.mb << 20) + pipeline.encode()
                    headers = {"Content-Type": "application/octet-stream"}
                    response, body = api.request("PUT", "/artifacts", data, headers)
                    assert response.status in (200, 201), body
                    params = {"weights": json.loads(body), "compute_s": args.compute_s}
                    code = READS_THEN_COMPUTES
                    nodes.append({"id": f"n{n}", "code": code, "worker": "far", "params": params})
                api.call("PUT", "/flows/reads", {"nodes": nodes})
                with tempfile.TemporaryDirectory() as cache:
                    options = ["--labels", "far", "--pipeline", pipeline, "--artifact-transport"]
                    worker = agent(
                        f"http://127.0.0.1:{forwarder.port}",
                        token["token"],
                        *options,
                        "http",
                        env={"FLUKSIO_ARTIFACT_CACHE": cache},
                    )
                    try:
                        while not api.call("GET", "/workers"):
                            time.sleep(0.05)
                        started = time.perf_counter()
                        assert api.run_to_end("reads")["state"] == "succeeded"
                        rows.append((pipeline, time.perf_counter() - started))
                    finally:
                        stop(worker)
                        while api.call("GET", "/workers"):
                            time.sleep(0.05)
        finally:
            forwarder.close()
            stop(engine)
    fetching = args.calls * args.mb * 8 * 1.048576 / args.mbit
    floor = max(fetching, args.calls * args.compute_s) + args.rtt_ms / 1000
    print(
        f"{args.calls} calls, each reading {args.mb} MB then computing {args.compute_s} s,"
        f" behind {args.rtt_ms:g} ms and {args.mbit:g} Mbit/s, --parallel 1"
    )
    print("| --pipeline | wall (s) | floor (s) | wall / floor |")
    print("|---|---:|---:|---:|")
    for pipeline, took in rows:
        print(f"| {pipeline} | {took:.2f} | {floor:.2f} | {took / floor:.2f} |")


if __name__ == "__main__":
    main()
