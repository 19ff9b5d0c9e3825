"""The job script and what Grid Engine prints back: pure text in and out, tested as text."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from xml.etree import ElementTree

from fluksio.provisioners import JobState, JobStatus, token_lines, worker_argv
from fluksio_gridengine.settings import GridEngineProfile, GridEngineSettings, qsub_runtime
from fluksio_gridengine.states import ge_state

__all__ = [
    "QueuedJob",
    "error_reasons",
    "job_name",
    "parse_qstat",
    "parse_qsub",
    "render_script",
]

OUTPUT_DIR = ".fluksio/jobs"
"""Where jobs' output goes, relative to the job user's home (one file per job)."""


def job_name(settings: GridEngineSettings, profile: GridEngineProfile, request_id: str) -> str:
    """``fluksio-PROVISIONER-PROFILE.REQUEST``: people see where a job is from, and a job
    whose id was never learned is found by its request (qstat lists names in full)."""
    return f"fluksio-{settings.name}-{profile.name}.{request_id}"


def _request_of(name: str) -> str | None:
    if not name.startswith("fluksio-"):
        return None
    _, dot, request = name.rpartition(".")
    return request if dot and request else None


def _hms(seconds: float) -> str:
    whole = math.ceil(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def render_script(
    settings: GridEngineSettings, profile: GridEngineProfile, *, request_id: str
) -> str:
    """The job script for one machine of ``profile``: pure, exact, quoted."""
    lines = [
        "#!/bin/bash",
        f"#$ -N {job_name(settings, profile, request_id)}",
        "#$ -S /bin/bash",
        "#$ -j y",
        f"#$ -o $HOME/{OUTPUT_DIR}/",
    ]
    slots = profile.cpus or 1
    if profile.cpus:
        lines.append(f"#$ -pe {settings.parallel_environment} {profile.cpus}")
    if profile.ram_mb and settings.memory_resource:
        # Grid Engine counts memory per slot: a job of 4 slots and 4G per slot has 16G.
        lines.append(f"#$ -l {settings.memory_resource}={math.ceil(profile.ram_mb / slots)}M")
    if profile.gpus and settings.gpu_resource:
        lines.append(f"#$ -l {settings.gpu_resource}={profile.gpus}")
    runtime = profile.runtime_s
    if profile.walltime_s is not None and qsub_runtime(profile.qsub) is None:
        lines.append(f"#$ -l h_rt={_hms(profile.walltime_s)}")
    if profile.queue:
        lines.append(f"#$ -q {profile.queue}")
    lines += [f"#$ {option}" for option in profile.qsub]
    lines += ["set -e", *profile.prerun, *token_lines(settings, settings.name, request_id)]
    if runtime is not None:
        # The worker learns when its job ends, so it takes only calls that fit before.
        lines.append(f"export FLUKSIO_WORKER_ENDS_AT=$(( $(date +%s) + {math.floor(runtime)} ))")
    # Resources the profile leaves unset the worker reads from the job's NSLOTS itself.
    worker = worker_argv(settings.worker_command, settings, profile)
    lines.append(f"exec {shlex.join(worker)}")
    return "\n".join(lines) + "\n"


def parse_qsub(stdout: str) -> str:
    """The job id ``qsub -terse`` printed (``1234``; an array job's ``1234.1-4:1``)."""
    text = stdout.strip()
    match = re.fullmatch(r"(\d+)(\.\d+-\d+:\d+)?", text)
    if match is None:
        raise ValueError(f"qsub -terse printed {text[:200]!r}, not a job id")
    return match.group(1)


@dataclass(frozen=True)
class QueuedJob:
    """One job of ``qstat -xml``: its status, and the request it was submitted for."""

    status: JobStatus
    request_id: str | None


def parse_qstat(xml: str) -> dict[str, QueuedJob]:
    """``qstat -xml`` as job id -> job (pending and running jobs alike)."""
    if not xml.strip():
        return {}
    try:
        # The submit host's own qstat, over the SSH connection trusted with the workers'
        # tokens; expat (2.4.1 and later) refuses runaway entity expansion.
        root = ElementTree.fromstring(xml)  # noqa: S314
    except ElementTree.ParseError as exc:
        raise ValueError(f"qstat -xml printed something that is not XML ({exc})") from None
    found: dict[str, QueuedJob] = {}
    for job in root.iter("job_list"):
        number = (job.findtext("JB_job_number") or "").strip()
        letters = (job.findtext("state") or "").strip()
        if not number.isdigit():
            continue
        state, words = ge_state(letters)
        where = (job.findtext("queue_name") or "").strip()
        if words is None and where and state is JobState.RUNNING:
            words = f"on {where}"
        status = JobStatus(state, letters, words)
        found[number] = QueuedJob(status, _request_of((job.findtext("JB_name") or "").strip()))
    return found


def error_reasons(text: str) -> str | None:
    """The reason ``qstat -j ID`` gives for a job in error (``error reason 1: ...``),
    without its timestamp and process prefix."""
    for line in text.splitlines():
        key, colon, rest = line.partition(":")
        if colon and key.strip().startswith("error reason"):
            message = re.sub(r"^\s*\d+:\s*", "", rest)
            message = re.sub(r"^\s*\d\d/\d\d/\d{4} [\d:]+ \[[\d:]+\]:\s*", "", message)
            return message.strip()[:300] or None
    return None
