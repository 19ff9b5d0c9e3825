"""The worker's script on a host, and what the host's commands print: pure text."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from fluksio.provisioners.base import JobState, JobStatus, exec_worker
from fluksio.provisioners.hosts.settings import HostProfile, HostsSettings
from fluksio.provisioners.ssh_access import token_lines

__all__ = ["Polled", "job_id", "parse_find", "parse_poll", "render_script", "split_job_id"]

MARK = "FLUKSIO_PROVISION_MARK"
"""In the worker's environment: the request it was started for."""


def render_script(
    settings: HostsSettings, host: HostProfile, *, request_id: str, connect_to: str | None = None
) -> str:
    """The script a host runs, detached, for one request: exact and quoted. ``connect_to``
    (the login route: the host's own loopback) is where its worker dials."""
    lines = [
        "set -e",
        # First: what the prerun starts carries it too, so stopping finds all of it.
        f"export {MARK}={shlex.quote(f'fluksio-request={request_id}')}",
        *host.prerun,
        *token_lines(settings, settings.name, request_id),
        exec_worker(settings.worker_command, settings, host, connect_to),
    ]
    return "\n".join(lines) + "\n"


def job_id(host: str, pid: int) -> str:
    """A worker's id: the host it runs on and its pid there."""
    return f"{host}:{pid}"


def split_job_id(value: str) -> tuple[str, int] | None:
    host, _, pid = value.rpartition(":")
    return (host, int(pid)) if host and pid.isdigit() else None


@dataclass(frozen=True)
class Polled:
    pid: int
    status: JobStatus


def parse_poll(stdout: str) -> list[Polled]:
    """``PID running`` or ``PID gone LAST LOG LINE``, a line each."""
    found = []
    for line in stdout.splitlines():
        pid, _, rest = line.strip().partition(" ")
        state, _, note = rest.partition(" ")
        if not pid.isdigit() or state not in ("running", "gone"):
            continue
        if state == "running":
            status = JobStatus(JobState.RUNNING, "RUNNING")
        else:
            status = JobStatus(JobState.COMPLETED, "EXITED", note.strip()[:200] or None)
        found.append(Polled(int(pid), status))
    return found


def parse_find(stdout: str) -> dict[str, int]:
    """``REQUEST_ID PID`` a line each, as request id -> pid."""
    found = {}
    for line in stdout.splitlines():
        request, _, pid = line.strip().partition(" ")
        if request and pid.isdigit():
            found[request] = int(pid)
    return found
