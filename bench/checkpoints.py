"""What a checkpoint costs: a call that saves its state and runs again, given it back,
beside a plain call, on the engine and on a worker of ours.

Each run is one node. A plain run: one call. A checkpointing run: the node saves a small
JSON state (``fluksio.checkpoint``) and ends ``--checkpoints`` times, each next attempt
reading it back (``fluksio.restored()``), then returns. Per attempt, the difference is
what the engine does for a checkpoint: store the artifact, write the node, queue the call
again, place it, and hand the state back.

The floor in the same run: a bare ``python -c pass``.

Run: ``.venv/bin/python bench/checkpoints.py [--runs N] [--checkpoints N]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, python_pass_ms, start_engine, start_worker, stop

PLAIN = "def process():\n    return 1\n"
CHECKPOINTS = (
    "import fluksio\n\n"
    "def process(times):\n"
    "    state = fluksio.restored() or {'count': 0, 'data': list(range(100))}\n"
    "    if state['count'] < times:\n"
    "        state['count'] += 1\n"
    "        fluksio.checkpoint(state)\n"
    "    return state['count']\n"
)


def _run_ms(api: Api, flow: str, runs: int, attempts: int) -> float:
    """The median time of a run, per attempt of its node, in ms."""
    spent = []
    for _ in range(runs):
        started = time.perf_counter()
        ended = api.run_to_end(flow)
        spent.append(time.perf_counter() - started)
        (node,) = ended["nodes"]
        assert ended["state"] == "succeeded" and node["attempt"] == attempts, ended
    return statistics.median(spent) * 1000 / attempts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--checkpoints", type=int, default=4)
    args = parser.parse_args()
    floor = python_pass_ms()
    rows = [("floor: python -c pass", floor)]
    with tempfile.TemporaryDirectory() as folder:
        engine, url = start_engine(Path(folder) / "data", "auto")
        worker = None
        try:
            api = Api.logged_in(url)
            worker = start_worker(api, url, "box")
            times = {"times": args.checkpoints}
            placements: tuple[tuple[str, dict[str, object]], ...] = (
                ("engine", {}),
                ("worker", {"worker": "box"}),
            )
            for where, placed in placements:
                nodes = [{"id": "n", "code": PLAIN, **placed}]
                api.call("PUT", f"/flows/plain-{where}", {"nodes": nodes})
                saves = {"code": CHECKPOINTS, "params": times, "max_checkpoints": 10}
                nodes = [{"id": "n", **saves, **placed}]
                api.call("PUT", f"/flows/saves-{where}", {"nodes": nodes})
                _run_ms(api, f"plain-{where}", 3, 1)  # warm: the fork server, the worker
                plain = _run_ms(api, f"plain-{where}", args.runs, 1)
                saving = _run_ms(api, f"saves-{where}", args.runs, args.checkpoints + 1)
                rows.append((f"{where}: a plain run of one call", plain))
                rows.append((f"{where}: an attempt after a checkpoint", saving))
        finally:
            stop(worker, engine)
    print(f"{'measure (median)':<46} {'ms':>9} {'÷ floor':>9}")
    for name, value in rows:
        print(f"{name:<46} {value:9.2f} {value / floor:9.2f}")


if __name__ == "__main__":
    main()
