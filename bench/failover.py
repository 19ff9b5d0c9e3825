"""Failover under load: two engines on one PostgreSQL database (one active, one standby),
four of our agents given both engines' URLs, and a script's ``map`` of short calls given
both too. The active engine is SIGKILLed ``--kills`` times at random moments, each time
started again at once (as a service manager would: it comes back as the standby).

Each call appends its position and the time it began to a ledger. Printed: for each kill,
the seconds from the kill to the first call the engine that took over placed (the first
ledger line begun after the kill, past the calls already running then); their p50 and
worst; and whether every call ended once (the map's results whole and in order), none
began twice, none is missing. Beside the floor measured in the same run.

PostgreSQL is the local cluster ``make postgres-up`` brings up; a database of the bench's
own is made and dropped.

Run: ``.venv/bin/python bench/failover.py [--calls 20000] [--kills 5] [--lease-s 10]``
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from calls import BIN, measure_floors, start_engine, stop

from fluksio.client.client import Client
from tests.support.postgres import fresh_database, local_postgres

ATTACH = "/api/v1/workers/attach"
IN_FLIGHT_S = 1.0
"""Calls begun this long after a kill may have been placed before it (their worker took
them ahead, ``--pipeline``): the first placement of the new engine is counted after it."""


def noted(x: int, ledger: str) -> int:
    with open(ledger, "a") as out:  # one short line per write: appended whole
        out.write(f"{x} {time.time()}\n")
    return x


class Engines:
    """Two engines of one database on fixed ports; the killed one started again."""

    def __init__(self, folder: Path, database: str, lease_s: float) -> None:
        key = folder / "engine.key"
        key.write_text(secrets.token_urlsafe(32))
        self._args = (
            "--database", database, "--database-key-file", str(key),
            "--artifacts-dir", str(folder / "artifacts"), "--lease-s", str(lease_s),
            "--engine-slots", "0",
        )  # fmt: skip
        self._folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        for which in range(2):
            process, url = start_engine(folder / f"data{which}", "fork", args=self._args)
            self.processes.append(process)
            self.urls.append(url)
            if which == 0:
                _until_ready(url)
        self._ports = [int(url.rsplit(":", 1)[1]) for url in self.urls]

    def active(self) -> int:
        for which, url in enumerate(self.urls):
            if _ready(url):
                return which
        return -1

    def kill_and_restart(self, which: int) -> None:
        self.processes[which].send_signal(signal.SIGKILL)
        self.processes[which].wait(timeout=30)
        (self._folder / f"data{which}" / "engine.json").unlink(missing_ok=True)
        args = (*self._args, "--port", str(self._ports[which]))
        self.processes[which], _ = start_engine(self._folder / f"data{which}", "fork", args=args)


def _ready(url: str) -> bool:
    try:
        ready_url = f"{url}/api/v1/healthz/ready"  # http on loopback: the engine's own
        with urllib.request.urlopen(ready_url, timeout=2) as answer:  # noqa: S310
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _until_ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while not _ready(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not become active")
        time.sleep(0.1)


def start_agents(client: Client, urls: list[str], count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` of our agents, each given every engine's attach URL."""
    given = [arg for u in urls for arg in ("--url", u.replace("http", "ws") + ATTACH)]
    agents = []
    for n in range(count):
        token = client.mint_worker_token(f"w{n}", ["remote"]).token
        agents.append(
            subprocess.Popen(
                [str(BIN / "fluksio-worker"), *given, "--labels", "remote", "--parallel", "2",
                 "--name", f"w{n}"],
                env=dict(os.environ, FLUKSIO_WORKER_TOKEN=token),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
    return agents


def mapped_with_kills(
    client: Client, engines: Engines, ledger: Path, calls: int, kills: int
) -> tuple[list[int], list[float], float]:
    """The map's results, when each kill was, and the seconds it all took."""
    killed: list[float] = []
    done = threading.Event()

    def killer() -> None:
        rng = random.Random(67)
        for _ in range(kills):
            if done.wait(rng.uniform(8, 20)):
                return
            which = engines.active()
            if which >= 0:
                killed.append(time.time())
                engines.kill_and_restart(which)

    thread = threading.Thread(target=killer)
    started = time.perf_counter()
    try:
        with client.executor(worker="remote") as executor:
            thread.start()
            results = list(executor.map(noted, range(calls), [str(ledger)] * calls))
    finally:
        done.set()
        if thread.is_alive():
            thread.join()
    return results, killed, time.perf_counter() - started


def report(
    args: argparse.Namespace, ledger: Path, outcome: tuple[list[int], list[float], float]
) -> None:
    results, kills, elapsed = outcome
    begun = [
        (int(x), float(at)) for x, at in (line.split() for line in ledger.read_text().splitlines())
    ]
    positions = [x for x, _ in begun]
    gaps = []
    for kill in kills:
        after = [at for _, at in begun if at > kill + IN_FLIGHT_S]
        if after:
            gaps.append(min(after) - kill)
    floors = measure_floors(100)
    print(f"calls {args.calls:,}, workers {args.workers}, lease {args.lease_s:g} s")
    print(f"time {elapsed:.1f} s ({args.calls / elapsed:,.0f} calls/s with {len(kills)} kills)")
    print("kill to first placement (s):", ", ".join(f"{g:.1f}" for g in gaps))
    if gaps:
        print(f"  p50 {statistics.median(gaps):.1f} s, worst {max(gaps):.1f} s")
    print(f"results whole and in order: {results == list(range(args.calls))}")
    print(f"begun twice: {len(positions) - len(set(positions))}, never begun:"
          f" {args.calls - len(set(positions))}")  # fmt: skip
    print("floors:", ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in floors.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--lease-s", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    cluster = local_postgres()
    os.environ["PGPASSFILE"] = cluster.passfile
    with tempfile.TemporaryDirectory() as folder, fresh_database(cluster) as database:
        engines = Engines(Path(folder), database, args.lease_s)
        agents: list[subprocess.Popen[bytes]] = []
        ledger = Path(folder) / "ledger"
        try:
            client = Client(engines.urls, ride_over_s=600)
            client.login("bench", "bench-password")
            agents = start_agents(client, engines.urls, args.workers)
            outcome = mapped_with_kills(client, engines, ledger, args.calls, args.kills)
        finally:
            stop(*agents)
            for process in engines.processes:
                process.kill()
                process.wait(timeout=30)
        report(args, ledger, outcome)


if __name__ == "__main__":
    main()
