"""Provisioning beyond Slurm (issue 28): the Grid Engine plugin and the SSH hosts
provisioner, each step against its floor measured in the same run.

* Grid Engine, on the cell of ``make gridengine-up`` over SSH to the local login node:
  - poll 20 live (held) jobs: one ``qstat -xml`` (ours) against ``qstat -j ID`` per job,
    and against ``true`` over the open connection (the SSH floor);
  - submit: ours (token file + ``qsub`` in one command) against a bare ``qsub``;
  - end to end: a one-node run, nothing attached, ``POST /runs`` to succeeded (submit,
    the cell starts the job, the worker starts and attaches, the node runs) against
    ``qsub`` until ``qstat`` says the job runs.
* SSH hosts: the same run, the worker started over SSH on the host, against starting the
  worker's interpreter there (``fluksio-worker --version`` over SSH).

Run as root after ``make gridengine-up``: ``.venv/bin/python bench/gridengine.py``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from fluksio_gridengine import GridEngineProvisioner, GridEngineSettings
from provisioning import BatchFloors, access, batch_steps, free_port, print_table, timed_runs

from fluksio.ssh import AsyncsshTransport

STATE = Path("/var/lib/fluksio-slurm")
NODE = "def process():\n    return 1\n"


def _facts() -> dict[str, str]:
    lines = (STATE / "env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _gridengine(facts: dict[str, str], port: int, qsub: list[str]) -> dict[str, Any]:
    return {
        "type": "gridengine",
        "name": "sge",
        "login": f"{facts['LOGIN']}:{facts['PORT']}",
        **access(facts, port),
        "profiles": [{"name": "one", "labels": ["hpc"], "ram_mb": 2048, "qsub": qsub}],
    }


def _hosts(facts: dict[str, str], port: int) -> dict[str, Any]:
    host = {"name": "box", "login": f"{facts['LOGIN']}:{facts['PORT']}", "labels": ["hpc"]}
    return {"type": "ssh", "name": "boxes", **access(facts, port), "hosts": [host]}


GRIDENGINE_FLOORS = BatchFloors(
    queue="one qstat -xml",
    per_job=lambda job: ["qstat", "-j", job],
    per_job_words="qstat -j per job",
    submit="qsub",
    bare_submit=["qsub", "-terse", "-h", "-b", "y", "true"],
    bare_words="qsub -b y true",
    delete="qdel",
)


async def _steps(facts: dict[str, str], repeat: int) -> dict[str, float]:
    settings = GridEngineSettings.model_validate(_gridengine(facts, 1, ["-h"]))
    return await batch_steps(GridEngineProvisioner(settings), "one", GRIDENGINE_FLOORS, repeat)


async def _job_running_ms(facts: dict[str, str], repeat: int) -> list[float]:
    """qsub until qstat says the job runs: what any worker in a job waits before it starts."""
    login = f"{facts['LOGIN']}:{facts['PORT']}"
    transport = AsyncsshTransport(login, facts["KEY"], known_hosts=facts["KNOWN_HOSTS"])
    python = str(Path(facts["WORKER"]).parent / "python")
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        argv = ["qsub", "-terse", "-o", "/dev/null", "-j", "y", "-b", "y", python, "-c", "pass"]
        job = (await transport.run(argv)).stdout.strip()
        while True:
            listed = (await transport.run(["qstat"])).stdout
            line = next((x for x in listed.splitlines() if x.split()[:1] == [job]), "")
            if not line or " qw " not in line:
                break
            await asyncio.sleep(0.05)
        samples.append((time.perf_counter() - started) * 1000)
        while job in (await transport.run(["qstat"])).stdout.split():
            await asyncio.sleep(0.05)
    await transport.close()
    return samples


async def _worker_start_ms(facts: dict[str, str], repeat: int) -> list[float]:
    """The worker's interpreter started over SSH: what a host's worker costs at least."""
    login = f"{facts['LOGIN']}:{facts['PORT']}"
    transport = AsyncsshTransport(login, facts["KEY"], known_hosts=facts["KNOWN_HOSTS"])
    await transport.run(["true"])
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await transport.run([facts["WORKER"], "--version"])
        samples.append((time.perf_counter() - started) * 1000)
    await transport.close()
    return samples


def _timed_runs(entry: dict[str, Any], port: int, repeat: int) -> list[float]:
    """ms from POST /runs to succeeded, each run started once the last one's worker left."""
    node = {"id": "n", "worker": "hpc", "code": NODE}
    return timed_runs(entry, port, [node], repeat, settle=lambda: time.sleep(0.5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=8)
    args = parser.parse_args()
    facts = _facts()
    results = asyncio.run(_steps(facts, args.repeat))
    floor = asyncio.run(_job_running_ms(facts, 5))
    port = free_port()
    ours = _timed_runs(_gridengine(facts, port, []), port, 5)
    results["qsub until qstat says r (floor), min"] = min(floor)
    results["qsub until qstat says r (floor), median"] = statistics.median(floor)
    results["Grid Engine: POST /runs to succeeded, min"] = min(ours)
    results["Grid Engine: POST /runs to succeeded, median"] = statistics.median(ours)
    started = asyncio.run(_worker_start_ms(facts, 5))
    port = free_port()
    hosts = _timed_runs(_hosts(facts, port), port, 5)
    results["ssh: fluksio-worker --version (floor), median"] = statistics.median(started)
    results["SSH host: POST /runs to succeeded, min"] = min(hosts)
    results["SSH host: POST /runs to succeeded, median"] = statistics.median(hosts)
    print_table(results, "ms")


if __name__ == "__main__":
    main()
