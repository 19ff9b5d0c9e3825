"""The ``local`` provisioner: each request starts one ``fluksio-worker`` process here.

Handy on a laptop (a node asking for label ``laptop`` gets a worker on demand, which
leaves after ``max_idle_s``) and in tests. A request's "job id" is the worker's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fluksio.provisioners import (
    JobState,
    JobStatus,
    ProfileSettings,
    Provisioner,
    ProvisionError,
    ProvisionerSettings,
    Submission,
    hookimpl,
    worker_argv,
)

STOP_WAIT_S = 10.0


class LocalSettings(ProvisionerSettings[ProfileSettings]):
    worker_command: str = str(Path(sys.executable).parent / "fluksio-worker")
    """The worker to start; by default the one installed beside the engine."""
    log_dir: str | None = None
    """Where each worker's output goes (``<request id>.log``); by default nowhere."""


class LocalProvisioner(Provisioner[LocalSettings, ProfileSettings]):
    type_name = "local"
    settings_model = LocalSettings
    job_noun = "local worker"

    def __init__(self, settings: LocalSettings, **given: Any) -> None:
        super().__init__(settings, **given)  # the engine's clock, its state directory
        self._processes: dict[str, asyncio.subprocess.Process] = {}

    def argv(self, profile: ProfileSettings) -> list[str]:
        return worker_argv(self.settings.worker_command, self.settings, profile)

    def render(self, profile: ProfileSettings, *, request_id: str) -> str:
        # The token travels in the environment, never in argv.
        return "FLUKSIO_WORKER_TOKEN=... " + shlex.join(self.argv(profile)) + "\n"

    async def submit(self, profile: ProfileSettings, *, request_id: str, token: str) -> Submission:
        output = None
        if self.settings.log_dir is not None:
            Path(self.settings.log_dir).mkdir(parents=True, exist_ok=True)
            output = open(Path(self.settings.log_dir) / f"{request_id}.log", "ab")  # noqa: SIM115
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(profile),
                env={**os.environ, "FLUKSIO_WORKER_TOKEN": token},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output or asyncio.subprocess.DEVNULL,
                stderr=output or asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            raise ProvisionError(f"cannot start {self.settings.worker_command}: {exc}") from None
        finally:
            if output is not None:
                output.close()
        self._processes[str(process.pid)] = process
        return Submission(job_id=str(process.pid), profile=profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        statuses = {}
        for job_id in job_ids:
            process = self._processes.get(job_id)
            if process is None:
                continue  # not ours (an earlier engine's): gone as far as we know
            code = process.returncode
            if code is None:
                statuses[job_id] = JobStatus(JobState.RUNNING, "RUNNING")
            else:
                state = JobState.COMPLETED if code == 0 else JobState.FAILED
                statuses[job_id] = JobStatus(state, f"EXITED {code}")
                del self._processes[job_id]
        return statuses

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        process = self._processes.pop(job_id or "", None)
        if process is not None:
            await _stop(process)

    async def close(self) -> None:
        # Workers started here die with the engine: nothing else would ever stop them.
        processes, self._processes = list(self._processes.values()), {}
        await asyncio.gather(*(_stop(process) for process in processes))


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_WAIT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [LocalProvisioner]
