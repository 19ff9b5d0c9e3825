"""Python calls the engine makes per unit of work, two builds side by side: deterministic.

CPU time on a shared machine moves by 10-20 % between two engines of the same build
(``bench/engine_cpu_ab.py`` shows it); the number of Python function calls an engine makes
for the same work does not. For each virtual environment given (``--a``, ``--b``) this
starts ``fluksio serve`` under ``cProfile``, does a workload ``--short`` times and then, in
a fresh engine, ``--long`` times, and divides the difference of the two engines' call
counts by the difference of the counts of work: what start-up and shutdown cost falls out.

Workloads: a one-node run on the engine; a one-node run on a worker (a local
``fluksio-worker`` of the same build); one call of a fan-out on the engine.

Run: ``.venv/bin/python bench/engine_calls_ab.py --a /tmp/base/.venv --b .venv``
"""

from __future__ import annotations

import pstats
import signal
import tempfile
from pathlib import Path

from calls import NOOP, Api, ab_arguments, start_engine
from remote_calls import _login, _start_agent, _wait_attached

WORKLOADS = {
    "local": "one-node run on the engine",
    "remote": "one-node run on a worker",
    "fanout": "one call of a fan-out on the engine",
}


def count_calls(venv: Path, workload: str, units: int) -> int:
    """Every Python function call an engine made, start to stop, doing ``units`` of it."""
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "engine.prof"
        engine, url = start_engine(
            Path(tmp) / "data", "auto", bin_dir=venv / "bin", profile=profile
        )
        agent = None
        try:
            api: Api = _login(url)
            token = api.call("POST", "/workers/tokens", {"name": "ab", "labels": ["remote"]})
            node = {"id": "n", "code": NOOP}
            api.call("PUT", "/flows/local", {"nodes": [node]})
            api.call("PUT", "/flows/remote", {"nodes": [{**node, "worker": "remote"}]})
            if workload == "remote":
                agent = _start_agent(url, token["token"], 1, bin_dir=venv / "bin")
                _wait_attached(api, "p1")
            if workload == "fanout":
                nodes = [{"id": f"n{i}", "code": NOOP} for i in range(units)]
                api.call("PUT", "/flows/fanout", {"nodes": nodes})
                assert api.run_to_end("fanout")["state"] == "succeeded"
            else:
                for _ in range(units):
                    assert api.run_to_end(workload)["state"] == "succeeded"
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(timeout=30)
            engine.send_signal(signal.SIGINT)  # cProfile writes its file on a clean exit
            engine.wait(timeout=60)
        stats = pstats.Stats(str(profile))
        return sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]


def main() -> None:
    parser = ab_arguments(__doc__)
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--long", type=int, default=1200)
    args = parser.parse_args()
    print(f"a = {args.a}; b = {args.b}; {args.long} - {args.short} units of each")
    print(f"{'Python calls in the engine, per':40} {'a':>8} {'b':>8} {'b / a':>7}")
    for workload, label in WORKLOADS.items():
        per = []
        for venv in (args.a, args.b):
            extra = count_calls(venv, workload, args.long) - count_calls(venv, workload, args.short)
            per.append(extra / (args.long - args.short))
        print(f"{label:40} {per[0]:8.0f} {per[1]:8.0f} {per[1] / per[0]:7.3f}")


if __name__ == "__main__":
    main()
