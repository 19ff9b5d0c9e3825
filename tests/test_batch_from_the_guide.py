"""Batch backends written from docs/writing-a-provisioner.md alone, against a real queue.

The guide promises that a batch system is a few declarations on ``BatchProvisioner``.
This one is written only from the guide's table and the names ``fluksio.provisioners``
exports (not from our Slurm backend: a different queue format, no partitions, no
walltime parsing), and drives the local Slurm over real SSH through the whole life cycle
the engine uses: submit (token on stdin), poll, find a job by its mark, cancel (the token
file goes too), check. The second is the guide's queue that takes a command line (not a
script on stdin), taken from the page's text as it is and run the same way.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fluksio.provisioners import (
    BatchProfile,
    BatchProvisioner,
    BatchSettings,
    JobState,
    JobStatus,
    QueuedJob,
    token_lines,
    worker_line,
)
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.wait import poll_async

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]


# -- the backend, as a plugin author would write it from the guide --------------------

_STATES = {"PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING,
           "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING,
           "COMPLETED": JobState.COMPLETED, "CANCELLED": JobState.CANCELLED,
           "TIMEOUT": JobState.TIMEOUT, "FAILED": JobState.FAILED}  # fmt: skip


class TinySettings(BatchSettings[BatchProfile]):
    pass


class TinyQueue(BatchProvisioner[TinySettings, BatchProfile]):
    type_name = "tiny"
    settings_model = TinySettings
    job_noun = "tiny job"

    submit_command = "sbatch --parsable"
    queue_command = ("squeue", "--me", "-h", "-t", "all", "-o", "%i %T %k")
    cancel_command = "scancel --"
    site_command = ("sinfo", "-h", "-o", "%P")

    def job_script(self, profile: BatchProfile, *, request_id: str, connect_to: str | None) -> str:
        lines = ["#!/bin/bash", f"#SBATCH --comment=mark={shlex.quote(request_id)}",
                 "#SBATCH --time=5", *profile.prerun,
                 *token_lines(self.settings, self.name, request_id),
                 worker_line(self.settings, profile, connect_to)]  # fmt: skip
        return "\n".join(lines) + "\n"

    def parse_queue(self, stdout: str) -> Mapping[str, QueuedJob]:
        jobs = {}
        for line in stdout.splitlines():
            job_id, state, mark = [*line.split(), "", ""][:3]
            ours = mark.removeprefix("mark=") if mark.startswith("mark=") else None
            jobs[job_id] = QueuedJob(JobStatus(_STATES.get(state, JobState.UNKNOWN), state), ours)
        return jobs

    def read_site(self, stdout: str) -> list[str]:
        return [f"partitions: {' '.join(stdout.split())}"]


# -- the life cycle, against the real queue --------------------------------------------


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


def _entry(kind: str, slurm: LocalSlurm) -> dict[str, Any]:
    """A ``provisioners.json`` entry of ``kind`` for the local Slurm, its workers dialling
    nowhere (the life cycle is the point, not the worker)."""
    return {
        "type": kind, "name": kind, "login": slurm.login_with_port,
        "ssh_key": slurm.key, "known_hosts": slurm.known_hosts,
        "engine_url": "ws://127.0.0.1:9/api/v1/workers/attach",
        "worker_command": slurm.worker,
        "profiles": [{"name": "one", "cpus": 1, "ram_mb": 100, "prerun": [slurm.prerun]}],
    }  # fmt: skip


async def test_a_backend_written_from_the_guide_runs_its_whole_life_cycle_on_a_real_queue(
    slurm: LocalSlurm,
) -> None:
    settings = TinySettings.model_validate(_entry("tiny", slurm))
    tiny = TinyQueue(settings)
    try:
        assert "partitions: " in await tiny.check()
        submitted = await tiny.submit(tiny.profile("one"), request_id="guide1", token="SECRET")
        statuses = await tiny.poll([submitted.job_id])
        assert statuses[submitted.job_id].state in (JobState.PENDING, JobState.RUNNING)
        assert await tiny.find(["guide1", "nobody"]) == {"guide1": submitted.job_id}

        await tiny.cancel(submitted.job_id, request_id="guide1")

        async def cancelled() -> bool:
            status = (await tiny.poll([submitted.job_id])).get(submitted.job_id)
            return status is None or status.state is JobState.CANCELLED

        await poll_async(cancelled, timeout=30, what="the job to be cancelled", interval=0.5)
        await tiny.cancel(submitted.job_id, request_id="guide1")  # an ended job: quietly
        left = slurm.ssh("sh", "-c", "ls ~/.fluksio/tokens/guide1 2>/dev/null; true").stdout
        assert left == "", "the token file is gone with the job"
    finally:
        await tiny.close()


# -- the guide's queue that takes a command line, run as the page writes it -------------

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "writing-a-provisioner.md"
COMMAND_LINE_QUEUE = "### A queue that takes a command line, not a script"


def _from_the_guide() -> dict[str, Any]:
    section = GUIDE.read_text().split(COMMAND_LINE_QUEUE)[1].split("\n### ")[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    written: dict[str, Any] = {"__name__": "guide_command_line_queue"}
    exec(compile(code, str(GUIDE), "exec"), written)  # noqa: S102 - the page's own code
    return written


async def test_the_guides_queue_that_takes_a_command_line_runs_its_life_cycle(
    slurm: LocalSlurm,
) -> None:
    guide = _from_the_guide()
    settings = guide["WrapSettings"].model_validate(_entry("wrap", slurm))
    wrap = guide["WrapProvisioner"](settings)
    request = f"wrap{os.getpid()}"

    def left(path: str) -> str:
        return slurm.ssh("sh", "-c", f"ls ~/{path} 2>/dev/null; true").stdout

    try:
        assert "partitions: " in await wrap.check()
        submitted = await wrap.submit(wrap.profile("one"), request_id=request, token="SECRET")
        assert submitted.job_id.isdigit()
        assert await wrap.find([request, "nobody"]) == {request: submitted.job_id}

        async def ran() -> bool:
            # The queue ran the command it was given: the script, gone as it started.
            status = (await wrap.poll([submitted.job_id])).get(submitted.job_id)
            return (
                status is not None
                and status.state is JobState.RUNNING
                and not left(f".fluksio/jobs/{request}.sh")
            )

        await poll_async(ran, timeout=60, what="the wrapped job to run its script", interval=0.5)
        await wrap.cancel(submitted.job_id, request_id=request)

        async def cancelled() -> bool:
            status = (await wrap.poll([submitted.job_id])).get(submitted.job_id)
            return status is None or status.state is JobState.CANCELLED

        await poll_async(cancelled, timeout=30, what="the job to be cancelled", interval=0.5)
        await wrap.cancel(submitted.job_id, request_id=request)  # an ended job: quietly
        assert left(f".fluksio/tokens/{request}") == "", "the token file is gone with the job"
    finally:
        await wrap.close()
