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
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine
from fluksio_gridengine import GridEngineProvisioner, GridEngineSettings
from provisioning import median_ms

from fluksio.ssh import SSHTransport

STATE = Path("/var/lib/fluksio-slurm")
NODE = "def process():\n    return 1\n"


def _facts() -> dict[str, str]:
    lines = (STATE / "env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _access(facts: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "ssh_key": facts["KEY"],
        "known_hosts": facts["KNOWN_HOSTS"],
        "engine_url": f"ws://127.0.0.1:{port}/api/v1/workers/attach",
        "worker_command": facts["WORKER"],
        "max_idle_s": 1,
        "poll_interval_s": 0.2,
    }


def _gridengine(facts: dict[str, str], port: int, qsub: list[str]) -> dict[str, Any]:
    return {
        "type": "gridengine",
        "name": "sge",
        "login": f"{facts['LOGIN']}:{facts['PORT']}",
        **_access(facts, port),
        "profiles": [{"name": "one", "labels": ["hpc"], "ram_mb": 2048, "qsub": qsub}],
    }


def _hosts(facts: dict[str, str], port: int) -> dict[str, Any]:
    host = {"name": "box", "login": f"{facts['LOGIN']}:{facts['PORT']}", "labels": ["hpc"]}
    return {"type": "ssh", "name": "boxes", **_access(facts, port), "hosts": [host]}


async def _steps(facts: dict[str, str], repeat: int) -> dict[str, float]:
    settings = GridEngineSettings.model_validate(_gridengine(facts, 1, ["-h"]))
    provisioner = GridEngineProvisioner(settings)
    transport = SSHTransport(settings.login, settings.ssh_key, known_hosts=settings.known_hosts)
    profile = provisioner.profile("one")
    await transport.run(["true"])  # both connections open before anything is timed
    await provisioner.check()
    results: dict[str, float] = {}
    results["ssh true (floor)"] = await median_ms(repeat, lambda: transport.run(["true"]))
    jobs = {
        (await provisioner.submit(profile, request_id=f"bench{i}", token="x")).job_id: f"bench{i}"
        for i in range(20)
    }
    try:
        results["poll 20 jobs: one qstat -xml (ours)"] = await median_ms(
            repeat, lambda: provisioner.poll(jobs)
        )

        async def per_job() -> None:
            for job in jobs:
                await transport.run(["qstat", "-j", job])

        results["poll 20 jobs: qstat -j per job"] = await median_ms(max(1, repeat // 4), per_job)
    finally:
        for job, request_id in jobs.items():
            await provisioner.cancel(job, request_id=request_id)
    submitted: list[str] = []

    async def ours() -> None:
        submitted.append((await provisioner.submit(profile, request_id="b", token="x")).job_id)

    async def bare() -> None:
        done = await transport.run(["qsub", "-terse", "-h", "-b", "y", "true"])
        submitted.append(done.stdout.strip())

    results["submit: ours (token file + qsub)"] = await median_ms(repeat, ours)
    results["submit: bare qsub -b y true (floor)"] = await median_ms(repeat, bare)
    for job in submitted:
        await transport.run(["qdel", job])
    await transport.close()
    await provisioner.close()
    return results


async def _job_running_ms(facts: dict[str, str], repeat: int) -> list[float]:
    """qsub until qstat says the job runs: what any worker in a job waits before it starts."""
    login = f"{facts['LOGIN']}:{facts['PORT']}"
    transport = SSHTransport(login, facts["KEY"], known_hosts=facts["KNOWN_HOSTS"])
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
    transport = SSHTransport(login, facts["KEY"], known_hosts=facts["KNOWN_HOSTS"])
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
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        data_dir.mkdir(mode=0o700)
        (data_dir / "provisioners.json").write_text(json.dumps([entry]))
        process, url = start_engine(data_dir, "auto", port=port)
        try:
            api = Api.logged_in(url)
            api.call(
                "PUT", "/flows/hpc", body={"nodes": [{"id": "n", "worker": "hpc", "code": NODE}]}
            )
            samples = []
            for _ in range(repeat):
                _wait_no_jobs(api)
                started = time.perf_counter()
                run = api.run_to_end("hpc")
                assert run["state"] == "succeeded", run
                samples.append((time.perf_counter() - started) * 1000)
            return samples
        finally:
            process.terminate()
            process.wait(timeout=30)


def _wait_no_jobs(api: Api) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        (provisioner,) = api.call("GET", "/workers/resources")["provisioners"]
        if not provisioner["profiles"][0]["jobs"]:
            time.sleep(0.5)
            return
        time.sleep(0.1)
    raise RuntimeError("the previous job did not end")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=8)
    args = parser.parse_args()
    facts = _facts()
    results = asyncio.run(_steps(facts, args.repeat))
    floor = asyncio.run(_job_running_ms(facts, 5))
    port = _free_port()
    ours = _timed_runs(_gridengine(facts, port, []), port, 5)
    results["qsub until qstat says r (floor), min"] = min(floor)
    results["qsub until qstat says r (floor), median"] = statistics.median(floor)
    results["Grid Engine: POST /runs to succeeded, min"] = min(ours)
    results["Grid Engine: POST /runs to succeeded, median"] = statistics.median(ours)
    started = asyncio.run(_worker_start_ms(facts, 5))
    port = _free_port()
    hosts = _timed_runs(_hosts(facts, port), port, 5)
    results["ssh: fluksio-worker --version (floor), median"] = statistics.median(started)
    results["SSH host: POST /runs to succeeded, min"] = min(hosts)
    results["SSH host: POST /runs to succeeded, median"] = statistics.median(hosts)
    width = max(map(len, results))
    print(f"{'what':<{width}}  ms")
    for name, value in results.items():
        print(f"{name:<{width}}  {value:9.1f}")


if __name__ == "__main__":
    main()
