"""The ``fluksio`` command against a running engine: a whole invocation, beside its floors.

Starts a real engine (``fluksio serve``), runs a flow once, and then times, per
invocation, from process start to exit:

* ``fluksio runs show ID`` and ``fluksio workers list`` (read an answer, print it);
* floors measured in the same run: ``python -I -S -c pass`` (an interpreter), and
  ``python -c "import click, pydantic"`` (the libraries any such command must load).

``--bin`` runs another build's commands (``/tmp/base/.venv/bin``) against its own engine,
so two builds are compared in one run as ratios to the same floors.

Run: ``.venv/bin/python bench/cli_start.py [--runs N] [--bin DIR ...]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from calls import NOOP, start_engine

from tests.support.client import SocketEngine

BIN = Path(sys.executable).parent


def _median_s(argv: list[str], runs: int, env: dict[str, str]) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


async def _ran_once(url: str) -> tuple[str, str]:
    """An access token, and the id of a run that ended: what the commands will show."""
    async with SocketEngine(url) as api:
        api.token = await api.login("bench", "bench-password")
        await api.put_flow("noop", [{"id": "n", "code": NOOP}])
        run = await api.wait_run((await api.start_run("noop"))["id"])
        return api.token, str(run["id"])


def measure(bin_dir: Path, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_engine(Path(tmp) / "data", "auto", bin_dir=bin_dir)
        try:
            token, run_id = asyncio.run(_ran_once(url))
            env = dict(os.environ, FLUKSIO_URL=f"{url}/api/v1", FLUKSIO_TOKEN=token)
            command = str(bin_dir / "fluksio")
            return {
                "runs show": _median_s([command, "runs", "show", run_id], runs, env),
                "workers list": _median_s([command, "workers", "list"], runs, env),
            }
        finally:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--bin", type=Path, action="append", default=[])
    args = parser.parse_args()
    env = dict(os.environ)
    python = str(BIN / "python")
    floor = _median_s([python, "-I", "-S", "-c", "pass"], args.runs, env)
    libraries = _median_s([python, "-c", "import click, pydantic"], args.runs, env)
    rows = [("floor: python -I -S -c pass", floor), ("floor: import click, pydantic", libraries)]
    for bin_dir in [BIN, *args.bin]:
        for name, seconds in measure(bin_dir, args.runs).items():
            rows.append((f"fluksio {name} ({bin_dir})", seconds))
    print("| invocation | median ms | x interpreter | x libraries |")
    print("|---|---:|---:|---:|")
    for name, seconds in rows:
        print(
            f"| {name} | {seconds * 1000:.0f} | {seconds / floor:.1f} | {seconds / libraries:.2f} |"
        )


if __name__ == "__main__":
    main()
