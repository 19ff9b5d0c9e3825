"""The job script and what Slurm prints back: pure text in and out, tested as text."""

from __future__ import annotations

import math
import re
import shlex

from fluksio.provisioners.base import JobStatus
from fluksio.provisioners.batch import QueuedJob, worker_line
from fluksio.provisioners.slurm.options import sbatch_time_limit
from fluksio.provisioners.slurm.settings import SlurmProfile, SlurmSettings
from fluksio.provisioners.slurm.states import slurm_state
from fluksio.provisioners.ssh_access import ca_file, token_file, token_lines

__all__ = [
    "SQUEUE_FORMAT",
    "QueuedJob",
    "ca_file",
    "job_mark",
    "parse_sbatch_parsable",
    "parse_squeue",
    "render_script",
    "token_file",
]


_MARK = "fluksio-request="


def job_mark(request_id: str) -> str:
    """The comment every job carries: how a job whose id was never learned is found."""
    return f"{_MARK}{request_id}"


def render_script(
    settings: SlurmSettings,
    profile: SlurmProfile,
    *,
    request_id: str,
    connect_to: str | None = None,
) -> str:
    """The job script for one machine of ``profile``: pure, exact, quoted.

    ``connect_to`` (``HOST:PORT``): where the worker connects instead of ``engine_url``'s
    host, still verifying the engine's own name (the login route)."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={shlex.quote(f'fluksio-{settings.name}-{profile.name}')}",
        f"#SBATCH --comment={shlex.quote(job_mark(request_id))}",
        "#SBATCH --nodes=1",
    ]
    if profile.cpus:
        lines.append(f"#SBATCH --cpus-per-task={profile.cpus}")
    asks_gpus = any(o.startswith(("--gres", "--gpus", "-G")) for o in profile.sbatch)
    if profile.gpus and not asks_gpus:
        lines.append(f"#SBATCH --gpus={profile.gpus}")
    if profile.ram_mb:
        lines.append(f"#SBATCH --mem={profile.ram_mb}M")
    if profile.walltime_s is not None and sbatch_time_limit(profile.sbatch) is None:
        # The job lives as long as the engine assumes it does (whole minutes, rounded up).
        lines.append(f"#SBATCH --time={math.ceil(profile.walltime_s / 60)}")
    lines += [f"#SBATCH {option}" for option in profile.sbatch]
    lines += ["set -e", *profile.prerun, *token_lines(settings, settings.name, request_id)]
    # Resources the profile leaves unset the worker reads from SLURM_* itself.
    lines.append(worker_line(settings, profile, connect_to))
    return "\n".join(lines) + "\n"


def parse_sbatch_parsable(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``1234`` or ``1234;cluster``)."""
    text = stdout.strip()
    match = re.fullmatch(r"(\d+)(;[A-Za-z0-9._-]+)?", text)
    if match is None:
        raise ValueError(f"sbatch --parsable printed {text[:200]!r}, not a job id")
    return match.group(1)


# The comment last: a user's own job may have "|" in its comment.
SQUEUE_FORMAT = "%i|%T|%r|%k"


def parse_squeue(stdout: str) -> dict[str, QueuedJob]:
    """``squeue -h -o '%i|%T|%r|%k'`` as job id -> job (Slurm's "None" reason dropped)."""
    found: dict[str, QueuedJob] = {}
    for line in stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) != 4:
            continue
        job_id, native, reason, comment = (part.strip() for part in parts)
        status = JobStatus(slurm_state(native), native, None if reason in ("", "None") else reason)
        marked = comment.startswith(_MARK) and len(comment) > len(_MARK)
        found[job_id] = QueuedJob(status, comment.removeprefix(_MARK) if marked else None)
    return found
