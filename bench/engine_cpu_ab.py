"""Engine CPU per call, two builds side by side: which costs the engine process more?

Starts one engine from each virtual environment given (``--a`` and ``--b``, e.g. a
worktree of the commit before a change, and this checkout), each on its own fresh data
directory, with a local worker of the same build attached to each; then alternates short
rounds between them: ``--runs`` one-node runs on the engine, then ``--runs`` on the
worker, and a fan-out of ``--fanout`` nodes on the engine, measuring each engine
process's own CPU time (its threads' ``schedstat``, in nanoseconds; its children, the fork server
and the calls, excluded). Alternating within one session cancels the drift of a shared,
noisy machine that separate runs suffer; the table gives each build's median per round
and the median (and quartiles) of the rounds' own ratios b / a. Run it with the same
build on both sides first: the spread it shows is the floor of what it can resolve.

Run: ``.venv/bin/python bench/engine_cpu_ab.py --a /tmp/base/.venv --b .venv``
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from calls import NOOP, Api, ab_arguments, process_cpu_seconds, start_engine
from engine_calls_ab import WORKLOADS
from remote_calls import _login, _start_agent, _wait_attached


class Build:
    """One engine (and its worker) of one virtual environment."""

    def __init__(self, venv: Path, data: Path) -> None:
        self.venv = venv
        self.engine, self.url = start_engine(data, "auto", bin_dir=venv / "bin")
        self.api: Api = _login(self.url)
        token = self.api.call("POST", "/workers/tokens", {"name": "ab", "labels": ["remote"]})
        self.api.call("PUT", "/flows/local", {"nodes": [{"id": "n", "code": NOOP}]})
        remote = [{"id": "n", "code": NOOP, "worker": "remote"}]
        self.api.call("PUT", "/flows/remote", {"nodes": remote})
        self.agent = _start_agent(self.url, token["token"], 1, bin_dir=venv / "bin")
        _wait_attached(self.api, "p1")
        self.samples: dict[str, list[float]] = {"local": [], "remote": [], "fanout": []}

    def round(self, runs: int, fanout: int) -> None:
        for flow in ("local", "remote"):
            before = process_cpu_seconds(self.engine.pid)
            for _ in range(runs):
                assert self.api.run_to_end(flow)["state"] == "succeeded"
            self.samples[flow].append((process_cpu_seconds(self.engine.pid) - before) / runs)
        before = process_cpu_seconds(self.engine.pid)
        assert self.api.run_to_end("fanout")["state"] == "succeeded"
        self.samples["fanout"].append((process_cpu_seconds(self.engine.pid) - before) / fanout)

    def stop(self) -> None:
        for process in (self.agent, self.engine):
            process.terminate()
            process.wait(timeout=30)


def main() -> None:
    parser = ab_arguments(__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--fanout", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        builds = [Build(args.a, Path(tmp) / "a"), Build(args.b, Path(tmp) / "b")]
        try:
            nodes = [{"id": f"n{i}", "code": NOOP} for i in range(args.fanout)]
            for build in builds:
                build.api.call("PUT", "/flows/fanout", {"nodes": nodes})
                build.round(10, args.fanout)  # warm up: fork server, connections, caches
                build.samples = {key: [] for key in build.samples}
            for _ in range(args.rounds):
                for build in builds:
                    build.round(args.runs, args.fanout)
        finally:
            for build in builds:
                build.stop()
    a, b = builds
    print(
        f"a = {args.a}; b = {args.b}; {args.rounds} alternating rounds; {args.fanout}-node fan-out"
    )
    print(
        f"{'engine process CPU (ms), per':40} {'a':>7} {'b':>7}"
        f" {'b / a, median of rounds':>24} {'quartiles':>12}"
    )
    for key, label in WORKLOADS.items():
        # Each round's own ratio: a drift of the machine between rounds cancels in it.
        ratios = sorted(y / x for x, y in zip(a.samples[key], b.samples[key], strict=True))
        low, _mid, high = statistics.quantiles(ratios, n=4)
        mid_a, mid_b = statistics.median(a.samples[key]), statistics.median(b.samples[key])
        print(
            f"{label:40} {mid_a * 1e3:7.3f} {mid_b * 1e3:7.3f}"
            f" {statistics.median(ratios):24.2f} {f'{low:.2f}-{high:.2f}':>12}"
        )


if __name__ == "__main__":
    main()
