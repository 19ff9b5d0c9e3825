"""Calls placed by what workers have cached, against placement that does not know.

One engine and four of our agents on 127.0.0.1 (real processes), each with its own
artifact cache and no shared store (as on four machines), ``--parallel 1``. Ten inputs of
``--mb`` MB each are stored; ``--calls`` calls each read one of them, chosen at random
(the same choices for both placements). Two ways of sending them:

* **one fan-out**: a run of ``--calls`` nodes, all queued at once;
* **in waves**: runs of four nodes one after another, so that every worker is free when
  a wave is placed.

For each, with the agents telling the engine what they cache (``--report-cache``, the
default) and not: the bytes moved (what the workers' caches hold at the end: each fetch
lands there once) and the wall time. The floor of bytes moved: each input once, to one
worker.

Run: ``.venv/bin/python bench/cache_placement.py [--calls N] [--mb M]``
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, agent, start_engine, stop

READS = (
    "import fluksio\n\n"
    "def process(weights):\n"
    "    with open(fluksio.load_artifact(weights), 'rb') as data:\n"
    "        return len(data.read(1))\n"
)
WORKERS = 4
INPUTS = 10


def _agents(url: str, token: str, caches: Path, report: bool) -> list[subprocess.Popen[bytes]]:
    agents = []
    for n in range(WORKERS):
        cache = caches / f"w{n}"
        cache.mkdir(parents=True)
        report_cache = "--report-cache" if report else "--no-report-cache"
        options = ["--labels", "far", "--name", f"w{n}", "--artifact-transport", "http"]
        env = {"FLUKSIO_ARTIFACT_CACHE": str(cache)}
        agents.append(agent(url, token, *options, report_cache, env=env))
    return agents


def _attached(api: Api, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(api.call("GET", "/workers")) != count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} agents did not attach")
        time.sleep(0.05)


def _moved(caches: Path) -> int:
    return sum(
        p.stat().st_size for p in caches.rglob("*") if p.is_file() and p.parent.name != "locks"
    )


def _nodes(refs: list[dict[str, object]], picks: list[int]) -> list[dict[str, object]]:
    return [
        {"id": f"n{i}", "code": READS, "worker": "far", "params": {"weights": refs[pick]}}
        for i, pick in enumerate(picks)
    ]


def measure(
    api: Api, url: str, refs: list[dict[str, object]], picks: list[int], **how: bool
) -> tuple[int, float]:
    """Bytes moved and wall time of ``picks`` sent as ``how`` says."""
    token = api.call("POST", "/workers/tokens", {"name": "far", "labels": ["far"]})["token"]
    with tempfile.TemporaryDirectory() as tmp:
        caches = Path(tmp)
        agents = _agents(url, token, caches, how["report"])
        try:
            _attached(api, WORKERS)
            started = time.perf_counter()
            if how["waves"]:
                for first in range(0, len(picks), WORKERS):
                    api.call(
                        "PUT",
                        "/flows/wave",
                        {"nodes": _nodes(refs, picks[first : first + WORKERS])},
                    )
                    assert api.run_to_end("wave")["state"] == "succeeded"
            else:
                api.call("PUT", "/flows/fanout", {"nodes": _nodes(refs, picks)})
                assert api.run_to_end("fanout")["state"] == "succeeded"
            took = time.perf_counter() - started
            return _moved(caches), took
        finally:
            stop(*agents)
            _attached(api, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--mb", type=int, default=50)
    args = parser.parse_args()
    picks = random.Random(40).choices(range(INPUTS), k=args.calls)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        try:
            api = Api.logged_in(url)
            refs = []
            for n in range(INPUTS):
                data = bytes([n]) * (args.mb << 20)
                response, body = api.request(
                    "PUT",
                    f"/artifacts?name=input{n}",
                    data,
                    {"Content-Type": "application/octet-stream"},
                )
                assert response.status in (200, 201), body
                refs.append(json.loads(body))
            for waves in (False, True):
                for report in (False, True):
                    moved, took = measure(api, url, refs, picks, waves=waves, report=report)
                    rows.append((waves, report, moved, took))
        finally:
            stop(engine)
    floor = INPUTS * args.mb
    print(f"{args.calls} calls, {WORKERS} workers, {INPUTS} inputs of {args.mb} MB read at random")
    print("| sent as | placement | moved (MB) | moved / floor | wall (s) |")
    print("|---|---|---:|---:|---:|")
    for waves, report, moved, took in rows:
        sent = "waves of 4" if waves else "one fan-out"
        placement = "by cache" if report else "best fit only"
        mb = moved / (1 << 20)
        print(f"| {sent} | {placement} | {mb:,.0f} | {mb / floor:.1f} | {took:.1f} |")
    print(f"floor: each input once, to one worker: {floor} MB")


if __name__ == "__main__":
    main()
