"""The Grid Engine provisioner: what it declares to the batch base (``qsub``, ``qstat``,
``qdel``, ``qconf`` and the job script); the base does the rest."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from fluksio.provisioners import (
    JOB_OUTPUT_DIR,
    BatchProvisioner,
    JobState,
    JobStatus,
    ProvisionError,
    token_lines,
    worker_line,
)
from fluksio_gridengine.script import error_reasons, parse_qstat, parse_qsub
from fluksio_gridengine.settings import GridEngineProfile, GridEngineSettings, qsub_runtime

__all__ = ["GridEngineProvisioner"]


class GridEngineProvisioner(BatchProvisioner[GridEngineSettings, GridEngineProfile]):
    """Submits to a Grid Engine cell through a remote shell on one of its submit hosts."""

    type_name = "gridengine"
    settings_model = GridEngineSettings
    job_noun = "Grid Engine job"

    submit_command = "qsub -terse"
    queue_command = 'qstat -xml -u "$(id -un)"'  # an ended job is no longer listed
    cancel_command = "qdel --"
    hold_option = "-h"
    cancel_gone = ("does not exist",)
    # The cell's queues, then its parallel environments (a cell may have none).
    site_command = 'qconf -sql && echo "#pe" && { qconf -spl 2>/dev/null || true; }'
    parse_job_id = staticmethod(parse_qsub)
    parse_queue = staticmethod(parse_qstat)

    def job_script(
        self, profile: GridEngineProfile, *, request_id: str, connect_to: str | None
    ) -> str:
        # Its name (qstat lists it whole) marks the request.
        lines = [
            "#!/bin/bash",
            f"#$ -N fluksio-{self.name}-{profile.name}.{request_id}",
            "#$ -S /bin/bash",
            "#$ -j y",
            f"#$ -o $HOME/{JOB_OUTPUT_DIR}/",
        ]
        if profile.cpus:
            lines.append(f"#$ -pe {self.settings.parallel_environment} {profile.cpus}")
        if profile.ram_mb and self.settings.memory_resource:
            # Grid Engine counts memory per slot: a job of 4 slots and 4G per slot has 16G.
            per_slot = math.ceil(profile.ram_mb / (profile.cpus or 1))
            lines.append(f"#$ -l {self.settings.memory_resource}={per_slot}M")
        if profile.gpus and self.settings.gpu_resource:
            lines.append(f"#$ -l {self.settings.gpu_resource}={profile.gpus}")
        if profile.walltime_s is not None and qsub_runtime(profile.qsub) is None:
            whole = math.ceil(profile.walltime_s)
            lines.append(f"#$ -l h_rt={whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}")
        if profile.queue:
            lines.append(f"#$ -q {profile.queue}")
        lines += [f"#$ {option}" for option in profile.qsub]
        lines += ["set -e", *profile.prerun, *token_lines(self.settings, self.name, request_id)]
        if profile.runtime_s is not None:
            # The worker learns when its job ends, so it takes only calls that fit before.
            ends = f"$(( $(date +%s) + {math.floor(profile.runtime_s)} ))"
            lines.append(f"export FLUKSIO_WORKER_ENDS_AT={ends}")
        # Resources the profile leaves unset the worker reads from the job's NSLOTS itself.
        lines.append(worker_line(self.settings, profile, connect_to))
        return "\n".join(lines) + "\n"

    def read_site(self, stdout: str) -> list[str]:
        queues_text, _, pes_text = stdout.partition("#pe\n")
        queues, pes = queues_text.split(), pes_text.split()
        problems = [
            f"profile {p.name!r} asks for queue {p.queue!r}, which the cell does not have"
            f" (qconf -sql lists: {', '.join(queues) or 'none'})"
            for p in self.settings.profiles
            if p.queue is not None and p.queue.partition("@")[0] not in queues
        ]
        pe = self.settings.parallel_environment
        if any(p.cpus for p in self.settings.profiles) and pe not in pes:
            problems.append(
                f"parallel_environment {pe!r} is not one of the cell's"
                f" (qconf -spl lists: {', '.join(pes) or 'none'})"
            )
        if problems:
            raise ProvisionError("; ".join(problems))
        return [f"queues: {' '.join(queues)}", f"parallel environments: {' '.join(pes)}"]

    def refusal(self, said: str) -> str:
        # "Unable to run job: Job was rejected because ...\nExiting.": its words, once.
        said = said.replace("Unable to run job: ", "").removesuffix("Exiting.").strip()
        return said.removesuffix(";").strip()

    def walltime_s(self, profile: GridEngineProfile) -> float | None:
        return profile.runtime_s

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        statuses = dict(await super().poll(job_ids))
        for job_id, status in statuses.items():
            if status.state is JobState.FAILED:
                # A job in error shows why only in `qstat -j`: asked for those alone.
                done = await self.run(self.run_shell('qstat -j "$1"', job_id))
                reason = error_reasons(done.stdout)
                if reason is not None:
                    statuses[job_id] = JobStatus(status.state, status.native, reason)
        return statuses
