"""What Grid Engine prints back: pure text in, tested as text."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from fluksio.provisioners import JobState, JobStatus, QueuedJob
from fluksio_gridengine.states import ge_state

__all__ = ["error_reasons", "parse_qstat", "parse_qsub"]


def parse_qsub(stdout: str) -> str:
    """The job id ``qsub -terse`` printed (``1234``; an array job's ``1234.1-4:1``)."""
    text = stdout.strip()
    match = re.fullmatch(r"(\d+)(\.\d+-\d+:\d+)?", text)
    if match is None:
        raise ValueError(f"qsub -terse printed {text[:200]!r}, not a job id")
    return match.group(1)


def parse_qstat(stdout: str) -> dict[str, QueuedJob]:
    """``qstat -xml`` as job id -> job (pending and running jobs alike)."""
    if not stdout.strip():
        return {}
    try:
        # The submit host's own qstat, over the SSH connection trusted with the workers'
        # tokens; expat (2.4.1 and later) refuses runaway entity expansion.
        root = ElementTree.fromstring(stdout)  # noqa: S314
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
        name = (job.findtext("JB_name") or "").strip()
        _, dot, request = name.rpartition(".")
        ours = name.startswith("fluksio-") and dot and request
        found[number] = QueuedJob(JobStatus(state, letters, words), request if ours else None)
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
