"""Chaos for a bounded time: agents killed and frozen, the engine killed and restarted,
while runs keep coming; then every call's executions are counted.

One engine and ``--agents`` real agents on 127.0.0.1. A flow of one node bound to the
agents' label appends its run's id to a file each time it executes. Runs are started
continuously (at most ``--in-flight`` at once); every ``--every`` seconds (on average) one
fault strikes, at random:

* an agent is SIGKILLed, and started again;
* an agent is frozen (SIGSTOP) for 1 to 8 s, then continued;
* the engine is SIGKILLed and started again on the same data directory.

The engine runs with ``--worker-gone-s 5`` so that frozen agents' calls resolve within the
run (the rule is the same at 90 s, only slower). After ``--minutes``, faults stop and
every run is waited for. The promises checked: every run ends (lost = 0); no node runs
twice (duplicated = 0: no node asks for ``retries``); a succeeded node ran exactly once.

Run: ``.venv/bin/python bench/chaos.py [--minutes M] [--agents N] [--seed S]``
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from calls import BIN, Api, start_engine

from fluksio.client import Client
from fluksio.client.executor import RemoteError

LABEL = "chaos"
FAST_LIVENESS = ("--worker-gone-s", "5", "--worker-check-s", "0.5")
"""Frozen agents' calls resolve within the run (the rule is the same at 90 s, slower)."""


class Engine:
    """An engine on a data directory and port of its own, started again on both."""

    def __init__(self, root: Path, args: tuple[str, ...] = FAST_LIVENESS) -> None:
        self.data = root / "data"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        # The same port each time: the agents dial it again after a restart.
        self.process, _url = start_engine(self.data, "auto", self.port, args=self.args)

    def kill(self, signum: int = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(signum)
        self.process.wait(timeout=60)
        self.restarts += 1

    def api(self) -> Api:
        return Api.logged_in(self.url)


class Agent:
    def __init__(self, index: int, url: str, token: str, log: Path) -> None:
        self.index, self.url, self.token, self.log = index, url, token, log
        self.name = f"agent-{index}"
        """Its ``--name``; two may share one, each on a token of its own (as the jobs of
        one Slurm profile do)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.extra: tuple[str, ...] = ()
        """More of its options."""

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
        env["FLUKSIO_WORKER_TOKEN"] = self.token
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(BIN / "fluksio-worker"), "--url",
                    self.url.replace("http", "ws") + "/api/v1/workers/attach",
                    "--name", self.name, "--labels", LABEL, "--parallel", "2",
                    *self.extra,
                ],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _node(marks: Path) -> str:
    return (
        "import random, time\n"
        "def process(tag):\n"
        f"    with open({str(marks)!r}, 'a') as handle:\n"
        "        handle.write(tag + '\\n')\n"
        "    time.sleep(random.uniform(0, 0.5))\n"
        "    return tag\n"
    )


def marked(x: int, marks: str) -> int:
    """A map's item: notes that it ran (``m<x>``), takes a moment, and gives ``x`` back."""
    import random  # noqa: PLC0415 - travels to the worker with the function
    import time  # noqa: PLC0415

    with open(marks, "a") as handle:
        handle.write(f"m{x}\n")
    time.sleep(random.uniform(0, 0.5))
    return x


class Maps(threading.Thread):
    """A script's ``executor.map_futures`` over the same agents, one map after another
    while the chaos lasts: each item's outcome, and how often it ran, counted."""

    def __init__(self, url: str, token: str, marks: Path, until: float, items: int = 48) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.marks, self.until, self.items = url, token, marks, until, items
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.sent = 0

    def run(self) -> None:
        executor = Client(self.url, token=self.token, ride_over_s=180).executor(worker=LABEL)
        while time.monotonic() < self.until:
            first = self.sent
            inputs = range(first, first + self.items)
            try:
                futures = executor.map_futures(marked, inputs, [str(self.marks)] * self.items)
            except (OSError, RuntimeError, ValueError) as exc:  # never sent: nothing to count
                self.outcomes[f"map not sent ({type(exc).__name__})"] += 1
                continue
            self.sent += self.items
            for future in futures:
                try:
                    future.result(timeout=600)
                    self.outcomes["succeeded"] += 1
                except RemoteError as failed:
                    self.outcomes[f"failed ({failed.type})"] += 1
                except concurrent.futures.TimeoutError:
                    self.outcomes["lost (never ended)"] += 1
        executor.shutdown(wait=False)

    def report(self) -> list[tuple[str, object]]:
        executions = collections.Counter(
            line for line in self.marks.read_text().split() if line.startswith("m")
        )
        duplicated = sum(1 for count in executions.values() if count > 1)
        return [
            ("map items sent (executor.map_futures)", self.sent),
            *((f"  items {outcome}", count) for outcome, count in sorted(self.outcomes.items())),
            ("map item executions counted", sum(executions.values())),
            ("map items duplicated (ran twice)", duplicated),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=12)
    parser.add_argument("--every", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    chance = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        marks = root / "executions"
        marks.touch()
        node = {"id": "n", "worker": LABEL, "code": _node(marks), "timeout": 30}
        engine, api, agents = attached(root, "chaos", node, [Agent] * args.agents)
        maps = _as_users_deploy(root, engine, api, agents, time.monotonic() + args.minutes * 60)
        faults: collections.Counter[str] = collections.Counter()
        runs: dict[str, str] = {}  # run id -> tag
        pending: set[str] = set()
        started = time.monotonic()
        next_fault = started + chance.expovariate(1 / args.every)
        try:
            while time.monotonic() - started < args.minutes * 60:
                try:
                    for run_id in list(pending):
                        state = api.call("GET", f"/runs/{run_id}")["state"]
                        if state not in ("queued", "running"):
                            pending.discard(run_id)
                    while len(pending) < args.in_flight:
                        tag = f"t{len(runs)}"
                        run = api.call("POST", "/flows/chaos/runs", {"params": {"tag": tag}})
                        runs[run["id"]] = tag
                        pending.add(run["id"])
                except (OSError, RuntimeError, ValueError):
                    time.sleep(0.2)  # the engine is down or restarting: try again
                    api = reconnect(engine)
                    continue
                if time.monotonic() >= next_fault:
                    fault = chance.choice(["kill-agent", "freeze-agent", "kill-engine"])
                    faults[fault] += 1
                    if _strike(fault, chance, agents, engine):
                        api = reconnect(engine)
                    next_fault = time.monotonic() + chance.expovariate(1 / args.every)
                time.sleep(0.05)
            _drain(api, pending)
            maps.join(timeout=900)
            _report(
                api,
                runs=runs,
                pending=pending,
                marks=marks,
                faults=faults,
                restarts=engine.restarts,
                seconds=time.monotonic() - started,
                more=[*maps.report(), ("maps still waiting at the end", int(maps.is_alive()))],
            )
        finally:
            stop_all(engine, agents)


def _as_users_deploy(
    root: Path, engine: Engine, api: Api, agents: list[Agent], until: float
) -> Maps:
    """Two of the agents made workers of one name (each on a token of its own, as the
    jobs of one Slurm profile are), and a script's maps over them started."""
    if len(agents) >= 2:
        agents[1].stop()
        agents[1].name = agents[0].name
        agents[1].start()
    marks = root / "map-executions"
    marks.touch()
    maps = Maps(engine.url, str(api.token), marks, until)
    maps.start()
    return maps


def _drain(api: Api, pending: set[str]) -> None:
    """Wait (two minutes at most) for the runs still going."""
    deadline = time.monotonic() + 120
    while pending and time.monotonic() < deadline:
        for run_id in list(pending):
            if api.call("GET", f"/runs/{run_id}?wait=1")["state"] not in ("queued", "running"):
                pending.discard(run_id)


def _strike(fault: str, chance: random.Random, agents: list[Agent], engine: Engine) -> bool:
    """Carry out one fault; True when the engine was restarted (log in again)."""
    agent = chance.choice(agents)
    assert agent.process is not None
    if fault == "kill-agent":
        agent.process.kill()
        agent.process.wait()
        agent.start()
        return False
    if fault == "freeze-agent":
        agent.process.send_signal(signal.SIGSTOP)
        time.sleep(chance.uniform(1, 8))
        agent.process.send_signal(signal.SIGCONT)
        return False
    engine.kill()
    engine.start()
    return True


def attached(
    root: Path,
    name: str,
    node: dict[str, Any],
    kinds: list[type[Agent]],
    engine_args: tuple[str, ...] = FAST_LIVENESS,
) -> tuple[Engine, Api, list[Agent]]:
    """An engine under ``root`` with flow ``name`` of ``node``, and one agent of each of
    ``kinds`` attached on a worker token of the label, started."""
    engine = Engine(root, args=engine_args)
    engine.start()
    api = engine.api()
    api.call("PUT", f"/flows/{name}", {"nodes": [node]})
    agents = []
    for i, kind in enumerate(kinds):  # a token each: a worker is known by its token's id
        token = api.call("POST", "/workers/tokens", {"name": name, "labels": [LABEL]})["token"]
        agents.append(kind(i, engine.url, token, root / f"agent-{i}.log"))
    for agent in agents:
        agent.start()
    return engine, api, agents


def stop_all(engine: Engine, agents: list[Agent]) -> None:
    """The scenario's processes stopped, its agents first."""
    for agent in agents:
        agent.stop()
    if engine.process is not None:
        engine.process.terminate()
        engine.process.wait(timeout=30)


def reconnect(engine: Engine) -> Api:
    deadline = time.monotonic() + 60
    while True:
        try:
            return engine.api()
        except (OSError, RuntimeError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _report(
    api: Api,
    *,
    runs: dict[str, str],
    pending: set[str],
    marks: Path,
    faults: collections.Counter[str],
    restarts: int,
    seconds: float,
    more: list[tuple[str, object]],
) -> None:
    executions = collections.Counter(marks.read_text().split())
    outcomes: collections.Counter[str] = collections.Counter()
    succeeded_not_once = 0
    for run_id, tag in runs.items():
        if run_id in pending:
            continue
        node: dict[str, Any] = api.call("GET", f"/runs/{run_id}")["nodes"][0]
        error = (node.get("error") or {}).get("type")
        outcomes[f"{node['state']}" + (f" ({error})" if error else "")] += 1
        if node["state"] == "succeeded" and executions[tag] != 1:
            succeeded_not_once += 1
    duplicated = sum(1 for count in executions.values() if count > 1)
    rows = [
        ("minutes of chaos", f"{seconds / 60:.1f}"),
        ("runs started", len(runs)),
        *((f"  {outcome}", count) for outcome, count in sorted(outcomes.items())),
        ("node executions counted", sum(executions.values())),
        ("lost (never ended)", len(pending)),
        ("duplicated (a node ran twice)", duplicated),
        ("succeeded without exactly one execution", succeeded_not_once),
        *((f"fault: {name}", count) for name, count in sorted(faults.items())),
        ("engine restarts", restarts),
        *more,
    ]
    print(f"{'measure':44} {'value':>10}")
    for name, value in rows:
        print(f"{name:44} {value!s:>10}")
    print(json.dumps({"lost": len(pending), "duplicated": duplicated}))


if __name__ == "__main__":
    main()
