"""When the batch job this worker runs in ends: found once at start, told in the hello.

The engine places a call here only if its timeout fits before that end, and lets the
worker go when too little is left; so no call is cut off by the walltime. In order:

1. ``--ends-at`` (or ``FLUKSIO_WORKER_ENDS_AT``): a Unix time or an ISO 8601 time, for a
   provisioner that knows its machines' end;
2. ``SLURM_JOB_END_TIME`` (Unix seconds; newer Slurm sets it);
3. inside a Slurm job (``SLURM_JOB_ID``): ``squeue -h -j ID -o %e``, the job's end time in
   the cluster's local time (``NONE`` or ``Unknown`` when it has no limit).

An end more than 300 days away counts as none: a job without a limit that Slurm's
backfill scheduler started shows one of 365 days.
"""

from __future__ import annotations

import logging
import math
import subprocess
from collections.abc import Callable, Mapping
from datetime import datetime

from fluksio.agent.clock import SYSTEM_CLOCK, Clock

__all__ = ["detect_job_end", "parse_end_time"]

log = logging.getLogger("fluksio.agent")
SQUEUE_TIMEOUT_S = 10.0
NO_END_BEYOND_S = 300 * 86400
"""An end further away than this is none: Slurm's backfill scheduler starts a job that has
no limit with one of 365 days, and squeue then shows that as its end."""

Squeue = Callable[[str], str]
"""Runs ``squeue`` for a job id and returns its output."""


def parse_end_time(text: str) -> float | None:
    """A Unix time from ``1796123885``, ``2026-12-01T11:23:05`` (local) or ISO with a zone;
    None for Slurm's words for no end. Raises ValueError for anything else."""
    value = text.strip()
    if value.upper() in ("", "NONE", "UNKNOWN", "N/A", "UNLIMITED", "INFINITE"):
        return None
    try:
        number = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(number):  # float() reads nan, inf and 1e400
            raise ValueError(f"{value!r} is not a finite number")
        return number
    # A time without a zone is this machine's local time, as squeue prints it.
    return datetime.fromisoformat(value).timestamp()


def _squeue(job_id: str) -> str:
    done = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%e"],
        capture_output=True,
        text=True,
        timeout=SQUEUE_TIMEOUT_S,
        check=False,
    )
    return done.stdout if done.returncode == 0 else ""


def detect_job_end(
    environ: Mapping[str, str],
    explicit: str | None = None,
    squeue: Squeue = _squeue,
    clock: Clock = SYSTEM_CLOCK,
) -> float | None:
    """When this worker's job ends, or None when it does not (or nobody can tell)."""
    end = _job_end(environ, explicit, squeue)
    if end is not None and end - clock.now() > NO_END_BEYOND_S:
        return None
    return end


def _job_end(environ: Mapping[str, str], explicit: str | None, squeue: Squeue) -> float | None:
    if explicit:
        return parse_end_time(explicit)  # a bad value is the user's to fix: it raises
    told = environ.get("SLURM_JOB_END_TIME")
    if told:
        try:
            return parse_end_time(told)
        except ValueError:
            log.warning("SLURM_JOB_END_TIME=%r is not a time; asking squeue", told)
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    try:
        answer = squeue(job_id).strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("cannot ask squeue when job %s ends (%s): assuming no end", job_id, exc)
        return None
    try:
        return parse_end_time(answer[0]) if answer else None
    except ValueError:
        log.warning("squeue gave %r as job %s's end: assuming no end", answer[0], job_id)
        return None
