"""The local Slurm cluster ``make slurm-up`` starts, and the Grid Engine cell ``make
gridengine-up`` starts beside it, as a test sees them.

``scripts/slurm-up.sh`` writes what it set up to ``$FLUKSIO_SLURM_STATE/env``. Without it
the Slurm tests skip on a laptop and fail under ``CI=true``: CI must not skip them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.ci import cannot_run
from tests.support.engine import attach_url_on
from tests.support.wait import wait_for

STATE = Path(os.environ.get("FLUKSIO_SLURM_STATE", "/var/lib/fluksio-slurm"))


@dataclass(frozen=True)
class LocalSlurm:
    login: str
    port: int
    key: str
    known_hosts: str
    worker: str
    prerun: str
    box_login: str = ""
    """A second machine (another sshd, another user), for the SSH hosts provisioner."""

    @property
    def login_with_port(self) -> str:
        """As ``login`` in provisioners.json: ``user@host:port``."""
        return f"{self.login}:{self.port}"

    def ssh(
        self, *argv: str, timeout: float = 30, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on the login node with the system's OpenSSH client (not ours)."""
        return subprocess.run(
            [
                "ssh",
                "-p",
                str(self.port),
                "-i",
                self.key,
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={self.known_hosts}",
                "-o",
                "LogLevel=ERROR",
                self.login,
                # ssh joins its arguments for the remote shell to split again: quote once.
                shlex.join(argv),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            check=False,
        )

    def job_state(self, job_id: str) -> str:
        """The job's state, finished ones included ('' once Slurm has forgotten it)."""
        done = self.ssh("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T")
        return done.stdout.strip()

    def fluksio_jobs(self, root: Path) -> list[str]:
        """Ids of this user's queued or running jobs that the engines whose data directories
        lie under ``root`` (a test's ``tmp_path``) asked for: each job's comment names its
        request, and each engine's database its requests. Another engine's jobs on the same
        cluster (a second checkout, a parallel test) are never counted."""
        return list(self.fluksio_job_states(root))

    def fluksio_job_states(self, root: Path) -> dict[str, str]:
        """Those jobs (:meth:`fluksio_jobs`) with their states: job id -> ``PENDING``..."""
        requests = _requests_under(root)
        done = self.ssh("squeue", "--me", "-h", "-o", "%i|%T|%k")
        assert done.returncode == 0, done.stderr
        mine = {}
        for line in done.stdout.splitlines():
            job_id, state, comment = [*line.split("|", 2), "", ""][:3]
            if comment.startswith(_MARK) and comment.removeprefix(_MARK) in requests:
                mine[job_id] = state
        return mine

    def cancel_leftovers(self, root: Path, timeout: float = 60) -> None:
        """Cancel the jobs the test's engines (data directories under ``root``) left queued
        or running, and wait until Slurm has let them go: a job a stopped engine did not own
        (its worker had attached) lives on, and would hold the cluster's CPUs, and show in
        ``squeue``, during the next test. Nobody else's jobs are touched."""
        leftovers = self.fluksio_jobs(root)
        if not leftovers:
            return
        self.ssh("scancel", *leftovers)
        wait_for(
            lambda: not set(leftovers) & set(self.fluksio_jobs(root)),
            timeout=timeout,
            what=f"cancelled jobs {leftovers} to leave squeue",
        )

    def token_files(self) -> set[str]:
        """Names of the token files Fluksio's submissions left in the login user's home."""
        done = self.ssh("sh", "-c", 'ls -A "$HOME/.fluksio/tokens" 2>/dev/null || true')
        return set(done.stdout.split())

    @contextlib.contextmanager
    def controller_frozen(self) -> Iterator[None]:
        """slurmctld stopped (SIGSTOP): sbatch hangs until it is continued, always on exit."""
        pid_text, comm = (STATE / "run" / "slurmctld.pid").read_text().split()
        pid = int(pid_text)
        assert Path(f"/proc/{pid}/comm").read_text().strip() == comm, "not our slurmctld"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


_MARK = "fluksio-request="
"""How a job's comment names the request it serves (the provisioner's job mark)."""
_ELSEWHERE: dict[Path, list[Callable[[], set[str]]]] = {}
"""Where else each root's engines keep their requests (:func:`requests_also_in`)."""
_SEEN: dict[Path, set[str]] = {}
"""Requests already read under each root: an engine forgets a request once its job ended,
and Slurm may list the job a moment longer."""


def requests_also_in(root: Path, read: Callable[[], set[str]]) -> None:
    """The engines of a test under ``root`` keep their requests elsewhere too (in
    PostgreSQL): ``read()`` gives their ids, while it can (then they are remembered)."""
    _ELSEWHERE.setdefault(root, []).append(read)


def _requests_under(root: Path) -> set[str]:
    """The machine requests of every engine whose data directory lies under ``root``, and
    of those :func:`requests_also_in` names."""
    seen = _SEEN.setdefault(root, set())
    for read in _ELSEWHERE.get(root, []):
        with contextlib.suppress(Exception):  # its database dropped: what was seen stays
            seen.update(read())
    for database in root.rglob("fluksio.sqlite3"):
        opened = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        with contextlib.closing(opened), contextlib.suppress(sqlite3.OperationalError):
            seen.update(row[0] for row in opened.execute("SELECT id FROM provision_requests"))
    return seen


def _facts(name: str, what: str, make: str) -> dict[str, str]:
    """The ``KEY=value`` lines a setup script left in ``STATE/name``; without them the test
    skips, and fails under ``CI=true``."""
    env_file = STATE / name
    if not env_file.exists():
        message = f"no local {what} ({env_file} missing): run `make {make}` as root"
        cannot_run(message)
    return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)


def local_slurm() -> LocalSlurm:
    facts = _facts("env", "Slurm", "slurm-up")
    return LocalSlurm(
        login=facts["LOGIN"],
        port=int(facts["PORT"]),
        key=facts["KEY"],
        known_hosts=facts["KNOWN_HOSTS"],
        worker=facts["WORKER"],
        prerun=facts["PRERUN"],
        box_login=f"{facts['BOX_LOGIN']}:{facts['BOX_PORT']}" if "BOX_LOGIN" in facts else "",
    )


@dataclass(frozen=True)
class LocalGridEngine:
    """The one-host Grid Engine cell ``make gridengine-up`` brings up; jobs are submitted
    through the local Slurm's login node, as its job user."""

    login: LocalSlurm
    queue: str
    parallel_environment: str
    slots: int

    def qstat_jobs(self) -> dict[str, str]:
        """The job user's jobs, as Grid Engine lists them: job id -> name."""
        listed = self.login.ssh("sh", "-c", 'qstat -xml -u "$(id -un)"')
        assert listed.returncode == 0, listed.stderr
        names = re.findall(
            r"<JB_job_number>(\d+)</JB_job_number>.*?<JB_name>([^<]*)</JB_name>",
            listed.stdout,
            re.S,
        )
        return dict(names)

    def fluksio_jobs(self, root: Path) -> list[str]:
        """Ids of the jobs that the engines whose data directories lie under ``root`` asked
        for: a job's name ends with its request (``fluksio-sge-small.REQUEST``). Another
        engine's jobs in the same cell are never counted, nor deleted."""
        requests = _requests_under(root)
        jobs = self.qstat_jobs().items()
        return [job for job, name in jobs if name.rpartition(".")[2] in requests]


def local_gridengine() -> LocalGridEngine:
    facts = _facts("gridengine.env", "Grid Engine", "gridengine-up")
    return LocalGridEngine(
        login=local_slurm(),
        queue=facts["QUEUE"],
        parallel_environment=facts["PE"],
        slots=int(facts["SLOTS"]),
    )


def slurm_provisioner(slurm: LocalSlurm, port: int, **changes: Any) -> dict[str, Any]:
    """A provisioners.json entry for the local cluster, its jobs dialling an engine on
    ``port``; ``profile`` changes its one profile, other keys the entry."""
    profile = {"name": "small", "cpus": 1, "ram_mb": 300, "labels": ["hpc"]}
    profile.update(changes.pop("profile", {}))
    entry: dict[str, Any] = {
        "type": "slurm",
        "name": "hpc",
        "login": slurm.login_with_port,
        "ssh_key": slurm.key,
        "known_hosts": slurm.known_hosts,
        "engine_url": attach_url_on(port),
        "worker_command": slurm.worker,
        "max_idle_s": 2,
        "provision_timeout_s": 60,
        "poll_interval_s": 0.3,
        "retry_base_s": 30,
        "profiles": [profile],
    }
    entry.update(changes)
    return entry


def job_writable_folder(prefix: str) -> Iterator[Path]:
    """A directory the cluster's unprivileged user (the jobs') can write to, removed with
    what it holds afterwards: for a fixture to yield from."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder)
