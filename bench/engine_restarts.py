"""Calls on workers through repeated engine restarts: every call ends once, and what a
restart adds to a call's latency.

One engine and ``--agents`` real agents (``--parallel 2`` each) on 127.0.0.1, the last
one relayed (``--connect-to``: a dropped connection is the relay's, to the engine). A
flow of one node bound to their label sleeps a drawn time (0.2-5 s) and writes a ledger
line when it starts and when it ends. ``--calls`` runs are started at once; while they
run, the engine is SIGKILLed and started again on its data directory and port every 20
to 40 s (``--every``), and once, half-way, stopped with SIGTERM (an upgrade) instead.
Then every run is waited for.

Checked: every run succeeded (none lost, none failed), each call started and ended
exactly once (the ledger), and how long after its node ended the engine recorded its end
(``recorded late``): for calls that ended while an engine was up, and for those that
ended while it was away (their answers held by their agents until the next engine
adopted them).

Run: ``.venv/bin/python bench/engine_restarts.py [--calls N] [--every S] [--seed S]``
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from calls import measure_floors, percentile
from chaos import LABEL, Agent, attached, reconnect, stop_all

ENDED = ("succeeded", "failed", "cancelled")


def _node(ledger: Path) -> str:
    return (
        "import time\n"
        "def process(tag, seconds):\n"
        f"    with open({str(ledger)!r}, 'a') as handle:\n"
        "        handle.write(f'start {tag} {time.time()}\\n')\n"
        "    time.sleep(seconds)\n"
        f"    with open({str(ledger)!r}, 'a') as handle:\n"
        "        handle.write(f'end {tag} {time.time()}\\n')\n"
        "    return tag\n"
    )


class RelayedAgent(Agent):
    """An agent whose connection counts as relayed: it reaches the engine's address
    through ``--connect-to`` (here the engine itself)."""

    def start(self) -> None:
        self.extra = ("--connect-to", self.url.split("://", 1)[1])
        super().start()


def main() -> None:  # noqa: PLR0915 - one scenario, read top to bottom
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--every", type=float, nargs=2, default=(20.0, 40.0))
    parser.add_argument("--shortest", type=float, default=0.2)
    parser.add_argument("--longest", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    chance = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        ledger = root / "ledger"
        ledger.touch()
        node = {"id": "n", "worker": LABEL, "code": _node(ledger)}
        kinds = [Agent] * (args.agents - 1) + [RelayedAgent]  # the last one relayed
        engine, api, agents = attached(
            root, "restarts", node, kinds, engine_args=("--worker-return-s", "300")
        )
        runs: dict[str, str] = {}
        started = time.monotonic()
        for n in range(args.calls):
            seconds = chance.uniform(args.shortest, args.longest)
            body = {"params": {"tag": f"t{n}", "seconds": seconds}}
            runs[api.call("POST", "/flows/restarts/runs", body)["id"]] = f"t{n}"
        kills: list[float] = []
        downs: list[tuple[float, float]] = []
        upgraded = False
        pending = set(runs)
        try:
            next_kill = time.monotonic() + chance.uniform(*args.every)
            while pending:
                try:
                    for run_id in list(pending)[:200]:
                        if api.call("GET", f"/runs/{run_id}")["state"] in ENDED:
                            pending.discard(run_id)
                except (OSError, RuntimeError, ValueError):
                    api = reconnect(engine)
                    continue
                if time.monotonic() >= next_kill and len(pending) > len(runs) // 20:
                    upgrade = not upgraded and len(pending) < len(runs) // 2
                    upgraded |= upgrade
                    went = time.time()
                    engine.kill(signal.SIGTERM if upgrade else signal.SIGKILL)
                    kills.append(went)
                    engine.start()
                    api = reconnect(engine)
                    downs.append((went, time.time()))
                    next_kill = time.monotonic() + chance.uniform(*args.every)
                time.sleep(0.2)
            seconds = time.monotonic() - started
            floor = measure_floors(20)["spawn_p50"]
            _report(api, runs, ledger, downs, seconds, upgraded, floor)
        finally:
            stop_all(engine, agents)


def _report(  # noqa: PLR0917 - what the scenario gathered, in its order
    api: Any,
    runs: dict[str, str],
    ledger: Path,
    downs: list[tuple[float, float]],
    seconds: float,
    upgraded: bool,
    floor: float,
) -> None:
    starts: collections.Counter[str] = collections.Counter()
    ends: dict[str, list[float]] = collections.defaultdict(list)
    for line in ledger.read_text().splitlines():
        what, tag, when = line.split()
        if what == "start":
            starts[tag] += 1
        else:
            ends[tag].append(float(when))
    outcomes: collections.Counter[str] = collections.Counter()
    late_up: list[float] = []
    late_away: list[float] = []
    adopted = 0
    for run_id, tag in runs.items():
        node: dict[str, Any] = api.call("GET", f"/runs/{run_id}")["nodes"][0]
        error = (node.get("error") or {}).get("type")
        outcomes[node["state"] + (f" ({error})" if error else "")] += 1
        adopted += any(e["event"] == "adopted" for e in node["events"] or [])
        if node["state"] == "succeeded" and len(ends[tag]) == 1 and node["ended_at"]:
            ended = ends[tag][0]
            while_away = any(went <= ended <= back for went, back in downs)
            recorded = datetime.fromisoformat(node["ended_at"]).timestamp()
            (late_away if while_away else late_up).append(recorded - ended)
    away = [back - went for went, back in downs]
    rows = [
        ("minutes", f"{seconds / 60:.1f}"),
        ("calls", len(runs)),
        *((f"  {outcome}", count) for outcome, count in sorted(outcomes.items())),
        ("engine restarts (one by SIGTERM)" if upgraded else "engine restarts", len(downs)),
        ("calls adopted by a restarted engine", adopted),
        ("lost (never ended)", sum(1 for tag in runs.values() if not ends[tag])),
        ("started more than once", sum(1 for count in starts.values() if count > 1)),
        ("ended more than once", sum(1 for found in ends.values() if len(found) > 1)),
        ("engine away (stopped to listening again), mean s", f"{_mean(away):.2f}"),
        ("floor: python -c pass, p50 s", f"{floor:.4f}"),
    ]
    for name, late in (("ended with the engine up", late_up), ("ended while away", late_away)):
        if late:
            rows.append((f"recorded late, {name}: calls", len(late)))
            rows.append(("  p50 / p99 / max s", _spread(late)))
            rows.append(("  p50, x the floor", f"{percentile(late, 0.5) / floor:.0f}"))
    print(f"{'measure':46} {'value':>22}")
    for name, value in rows:
        print(f"{name:46} {value!s:>22}")
    print(json.dumps({"outcomes": dict(outcomes), "restarts": len(downs)}))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _spread(values: list[float]) -> str:
    return " / ".join(f"{percentile(values, q):.3f}" for q in (0.5, 0.99)) + (
        f" / {max(values):.3f}"
    )


if __name__ == "__main__":
    main()
