"""The built-in Slurm provisioner: a job whose payload is a worker dialling back.

The job script is a pure render (:func:`render_script`), tested as text. Everything that
comes from configuration and is data (URL, labels, names) is shell-quoted; ``prerun``
lines are commands by design (``module load``, ``source venv/bin/activate``); no field
may contain a control character, so nothing can add a line to the script. The worker's
token never appears in the script, argv or the job's recorded environment: it is written
to a 0600 file in the same SSH command that runs ``sbatch`` (token on stdin), and the
script reads it from there and deletes it. A ``ca_file`` travels the same way (the script
only names where it was put).

Every job is marked with its request id (``--comment=fluksio-request=<id>``, shown by
``squeue -o %k``): a submission whose answer was lost (a hung ``sbatch``, an engine
killed mid-submission) is found by its mark, never submitted again. The token file's name
is the request id too, so a restarted engine, which keeps request ids on disk, removes
what a cancelled job left behind.
"""

from __future__ import annotations

import base64
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from pydantic import Field, field_validator

from fluksio.provisioners.base import (
    JobState,
    JobStatus,
    ProfileSettings,
    Provisioner,
    ProvisionError,
    ProvisionerSettings,
    Submission,
    worker_argv,
)
from fluksio.provisioners.hookspecs import hookimpl
from fluksio.ssh import open_transport
from fluksio.ssh.shell import Completed, RemoteShell, SharedLogin, Transport, TransportError

__all__ = [
    "SLURM_STATES",
    "QueuedJob",
    "SlurmProfile",
    "SlurmProvisioner",
    "SlurmSettings",
    "ca_file",
    "fluksio_provisioner_types",
    "job_mark",
    "parse_sbatch_parsable",
    "parse_slurm_time",
    "parse_squeue",
    "render_script",
    "sbatch_time_limit",
    "slurm_state",
    "token_file",
]

log = structlog.get_logger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

SLURM_STATES: Mapping[str, JobState] = {
    # Waiting for an allocation, or for one given back (squeue(1), JOB STATE CODES).
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,  # allocated, its nodes still booting
    "REQUEUED": JobState.PENDING,  # a completing job put back in the queue
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESIZING": JobState.PENDING,  # about to change size
    # "has an allocation, but execution has been suspended and CPUs have been released
    # for other jobs": it cannot run until it is resumed and given them back, as a job
    # waiting in the queue cannot; nothing of it ended.
    "SUSPENDED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,  # some processes still active
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    # "has an allocation, but execution has been stopped with SIGSTOP; CPUs have been
    # retained": it started and keeps its machine, and goes on at SIGCONT. Its worker is
    # frozen meanwhile, which the liveness rule (worker_gone_s) sees; the job has not
    # ended, so it is not cancelled or counted as a failure.
    "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,  # by its user (us) or an administrator
    # "Sibling was removed from cluster due to other cluster starting the job": another
    # cluster of the federation runs it, so this one was withdrawn, not failed.
    "REVOKED": JobState.CANCELLED,
    # "Job terminated due to preemption": Slurm ended it for a job of higher priority
    # (PreemptMode=CANCEL; with REQUEUE it shows as REQUEUED instead). The system ended
    # it, as an administrator's cancel would; its payload did not fail.
    "PREEMPTED": JobState.CANCELLED,
    # "terminated upon reaching its time limit", or "on deadline": ended by time.
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.TIMEOUT,
    "FAILED": JobState.FAILED,  # a non-zero exit code or another failure
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    # "requeued in a special state", set by a site's EpilogSlurmctld for a particular
    # exit value: held until someone releases it, so for us its run has ended badly.
    "SPECIAL_EXIT": JobState.FAILED,
}
"""Slurm's job states (``squeue -o %T``) onto ours; anything else is UNKNOWN. The quoted
words are squeue(1)'s. Every terminal state ends the request alike; which one it was
shows in the words the screen and the log give (``job 42 ended PREEMPTED``)."""


_TIME_OPTION = re.compile(r"^(?:--time=|--time\s+|-t\s*)(\S+)$")
_NO_LIMIT = frozenset({"UNLIMITED", "INFINITE", "0"})


def parse_slurm_time(text: str) -> float | None:
    """Seconds from a Slurm time limit, in any of its forms; None for no limit.

    ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours``,
    ``days-hours:minutes``, ``days-hours:minutes:seconds``; ``0``, ``UNLIMITED`` and
    ``INFINITE`` mean none. Anything else raises ValueError.
    """
    value = text.strip().upper()
    if value in _NO_LIMIT:
        return None
    days, dash, rest = value.rpartition("-") if "-" in value else ("", "", value)
    if not re.fullmatch(r"\d+(:\d+){0,2}", rest) or (dash and not days.isdigit()):
        raise ValueError(f"{text!r} is not a Slurm time limit")
    parts = [int(p) for p in rest.split(":")]
    if dash:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(parts) == 1:  # minutes
        total = parts[0] * 60
    elif len(parts) == 2:  # minutes:seconds
        total = parts[0] * 60 + parts[1]
    else:  # hours:minutes:seconds
        total = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(total) if total else None


def sbatch_time_limit(options: list[str]) -> str | None:
    """The value of the last ``--time``/``-t`` among ``sbatch`` options, if any (the
    last wins, as with sbatch itself)."""
    found = None
    for option in options:
        match = _TIME_OPTION.match(option.strip())
        if match is not None:
            found = match.group(1)
    return found


_PARTITION_OPTION = re.compile(r"^(?:--partition=|--partition\s+|-p\s*)(\S+)$")


def sbatch_partitions(options: list[str]) -> list[str]:
    """The partitions the last ``--partition``/``-p`` among ``sbatch`` options names (a
    comma-separated list: the job may run in any of them); empty: the cluster's default."""
    found: list[str] = []
    for option in options:
        match = _PARTITION_OPTION.match(option.strip())
        if match is not None:
            found = [part for part in match.group(1).split(",") if part]
    return found


def missing_partitions(profiles: list[SlurmProfile], sinfo_partitions: list[str]) -> list[str]:
    """A sentence for each profile naming a partition ``sinfo`` does not list."""
    known = {name.rstrip("*") for name in sinfo_partitions}
    shown = ", ".join(sorted(known)) or "none"
    return [
        f"profile {profile.name!r} asks for partition {partition!r}, which the cluster"
        f" does not have (sinfo lists: {shown})"
        for profile in profiles
        for partition in sbatch_partitions(profile.sbatch)
        if partition not in known
    ]


def slurm_state(text: str) -> JobState:
    state = SLURM_STATES.get(text.strip().split(" ")[0].rstrip("+"))
    if state is None:
        log.warning("slurm.unknown_state", state=text)
        return JobState.UNKNOWN
    return state


def _no_control(values: list[str], what: str) -> list[str]:
    for value in values:
        if _CONTROL.search(value):
            raise ValueError(f"{what} must not contain control characters (newlines, tabs)")
    return values


class SlurmProfile(ProfileSettings):
    sbatch: list[str] = Field(default_factory=list)
    """Extra ``sbatch`` options, one per entry: ``--partition=gpu``."""
    prerun: list[str] = Field(default_factory=list)
    """Shell lines run before the worker starts (they own the environment)."""

    @field_validator("sbatch")
    @classmethod
    def _sbatch_options(cls, values: list[str]) -> list[str]:
        for value in _no_control(values, "sbatch options"):
            if not value.startswith("-"):
                raise ValueError(f"{value!r} is not an sbatch option (it starts with -)")
        return values

    @field_validator("prerun")
    @classmethod
    def _prerun_lines(cls, values: list[str]) -> list[str]:
        return _no_control(values, "prerun lines")

    @field_validator("sbatch")
    @classmethod
    def _time_limit(cls, values: list[str]) -> list[str]:
        limit = sbatch_time_limit(values)
        if limit is not None:
            parse_slurm_time(limit)  # a ValueError names the bad limit
        return values

    @property
    def time_limit_s(self) -> float | None:
        """How long its jobs may run: ``walltime_s`` if set, else the ``--time`` of its
        ``sbatch`` options; None: no limit the profile states."""
        if self.walltime_s is not None:
            return self.walltime_s
        limit = sbatch_time_limit(self.sbatch)
        return parse_slurm_time(limit) if limit is not None else None


class SlurmSettings(ProvisionerSettings[SlurmProfile]):
    login: str = Field(pattern=r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:[0-9]{1,5})?$")
    """``user@host[:port]`` of the login node, or a ``Host`` alias of ``ssh_config``."""
    ssh_key: str | None = Field(default=None, min_length=1)
    """The private key to log in with (default: the config's ``IdentityFile``, the
    ssh-agent's keys, and the user's default keys)."""
    known_hosts: str | None = None
    """Host keys to check against (default: the config's ``UserKnownHostsFile``, else
    ``~/.ssh/known_hosts``)."""
    ssh_config: str | None = None
    """The OpenSSH client config to read (default: ``~/.ssh/config`` if it exists)."""
    trust_on_first_use: bool = False
    """Accept and remember an unknown host key once; off by default."""
    transport: Transport = "asyncssh"
    """How SSH is spoken: ``asyncssh`` (in the engine, the default) or ``openssh`` (the
    system ``ssh``: everything the user's OpenSSH does, one shared connection, and
    ``fluksio provisioners login`` for sites that ask for a one-time code)."""
    worker_command: str = "fluksio-worker"
    ca_file: str | None = Field(default=None, min_length=1)
    """PEM certificates of a private CA the workers must trust for ``engine_url``. Read at
    each submission and written beside the token on the login node; the job script only
    names that file."""

    @field_validator("ca_file")
    @classmethod
    def _readable_pem(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                text = Path(value).expanduser().read_text(errors="replace")
            except OSError as exc:
                raise ValueError(f"{value} cannot be read ({exc.strerror})") from None
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise ValueError(f"{value} holds no PEM certificate")
        return value

    @field_validator("engine_url", "worker_command")
    @classmethod
    def _single_line(cls, value: str) -> str:
        _no_control([value], "this field")
        return value


def token_file(request_id: str) -> str:
    """Where a request's job finds its token, relative to the login user's home."""
    return f".fluksio/tokens/{request_id}"


def ca_file(provisioner: str) -> str:
    """Where a provisioner's jobs find its ``ca_file``, relative to the login user's home
    (one per provisioner, replaced at each submission: a CA is public, and may rotate)."""
    return f".fluksio/ca/{provisioner}.pem"


_MARK = "fluksio-request="


def job_mark(request_id: str) -> str:
    """The comment every job carries: how a job whose id was never learned is found."""
    return f"{_MARK}{request_id}"


def render_script(settings: SlurmSettings, profile: SlurmProfile, *, request_id: str) -> str:
    """The job script for one machine of ``profile``: pure, exact, quoted."""
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
    lines += ["set -e", *profile.prerun]
    token_path = '"$HOME"/' + shlex.quote(token_file(request_id))
    lines += [
        "# The worker token: read from a file written at submission, then deleted.",
        f"FLUKSIO_WORKER_TOKEN=$(cat -- {token_path})",
        f"rm -f -- {token_path}",
        "export FLUKSIO_WORKER_TOKEN",
    ]
    if settings.ca_file is not None:
        lines.append(f'export FLUKSIO_WORKER_CA_FILE="$HOME"/{shlex.quote(ca_file(settings.name))}')
    # Resources the profile leaves unset the worker reads from SLURM_* itself.
    worker = worker_argv(settings.worker_command, settings, profile)
    quoted = " ".join(shlex.quote(part) for part in worker[1:])
    lines.append(f"exec {shlex.quote(worker[0])} {quoted}")
    return "\n".join(lines) + "\n"


def parse_sbatch_parsable(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``1234`` or ``1234;cluster``)."""
    text = stdout.strip()
    match = re.fullmatch(r"(\d+)(;[A-Za-z0-9._-]+)?", text)
    if match is None:
        raise ValueError(f"sbatch --parsable printed {text[:200]!r}, not a job id")
    return match.group(1)


# Writes the token (the first line of stdin) to a 0600 file and, when ``$2`` names one, the
# CA (the next line, base64) to its file; then hands the rest of stdin, the script, to
# sbatch: one round trip, and neither is ever in an argv or the script. ``read`` takes
# stdin a byte at a time, so nothing of the script is consumed with them.
_SUBMIT = (
    'umask 077 && mkdir -p -- "$HOME/.fluksio/tokens" && IFS= read -r token'
    ' && { [ -z "$2" ] || { IFS= read -r ca && mkdir -p -- "$HOME/.fluksio/ca"'
    ' && printf "%s" "$ca" | base64 -d > "$HOME/$2.new" && mv -f -- "$HOME/$2.new" "$HOME/$2"; }; }'
    ' && printf "%s\\n" "$token" > "$HOME/$1" && unset token'
    ' && { sbatch --parsable; status=$?; [ "$status" = 0 ] || rm -f -- "$HOME/$1";'
    ' exit "$status"; }'
)
# The token file goes whether or not there was a job to cancel, or scancel worked.
_CANCEL = (
    'status=0; if [ -n "$1" ]; then scancel -- "$1" || status=$?; fi;'
    ' rm -f -- "$HOME/$2"; exit "$status"'
)
# The comment last: a user's own job may have "|" in its comment.
_SQUEUE_FORMAT = "%i|%T|%r|%k"


@dataclass(frozen=True)
class QueuedJob:
    """One line of ``squeue``: a job's status, and the request it was marked with."""

    status: JobStatus
    request_id: str | None


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


class SlurmProvisioner(Provisioner[SlurmSettings, SlurmProfile]):
    """Submits to a Slurm cluster through a remote shell on its login node.

    ``shell`` is where the commands run: by default SSH to ``login``
    (:class:`~fluksio.ssh.SSHTransport`); tests hand it scripted replies.
    """

    type_name = "slurm"
    settings_model = SlurmSettings
    job_noun = "Slurm job"

    def __init__(self, settings: SlurmSettings, shell: RemoteShell | None = None) -> None:
        super().__init__(settings)
        self._given_shell = shell
        self._opened_shell: RemoteShell | None = None

    @property
    def shell(self) -> RemoteShell:
        """Where its commands run; SSH is opened on first use, once :attr:`state_dir` is
        known (the shared connection's socket lives there)."""
        if self._given_shell is not None:
            return self._given_shell
        if self._opened_shell is None:
            settings = self.settings
            self._opened_shell = open_transport(
                settings.transport,
                settings.login,
                settings.ssh_key,
                known_hosts=settings.known_hosts,
                trust_on_first_use=settings.trust_on_first_use,
                ssh_config=settings.ssh_config,
                control_path=self.state_dir / "ssh" if self.state_dir is not None else None,
            )
            self._opened_shell.on_command = self._command_done
        return self._opened_shell

    def _command_done(self, program: str, seconds: float, reached: bool) -> None:
        if self.on_command is not None:
            self.on_command(program, seconds, reached)

    def render(self, profile: SlurmProfile, *, request_id: str) -> str:
        return render_script(self.settings, profile, request_id=request_id)

    def walltime_s(self, profile: SlurmProfile) -> float | None:
        return profile.time_limit_s

    async def submit(self, profile: SlurmProfile, *, request_id: str, token: str) -> Submission:
        script = self.render(profile, request_id=request_id)
        carried, ca_path = f"{token}\n", ""
        if self.settings.ca_file is not None:
            carried += f"{_base64_of(self.settings.ca_file)}\n"
            ca_path = ca_file(self.name)
        argv = ["sh", "-c", _SUBMIT, "fluksio-submit", token_file(request_id), ca_path]
        done = await self._run(argv, stdin=carried + script, once=True)
        if not done.ok:
            said = done.error_text().replace("sbatch: error: ", "")
            raise ProvisionError(f"sbatch refused the job: {said}")
        try:
            job_id = parse_sbatch_parsable(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None
        return Submission(job_id=job_id, profile=profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        wanted = set(job_ids)
        if not wanted:
            return {}
        queue = await self._queue()
        return {job_id: job.status for job_id, job in queue.items() if job_id in wanted}

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        wanted = set(request_ids)
        if not wanted:
            return {}
        queue = await self._queue()
        # One job per mark: a submission is never sent twice.
        return {
            job.request_id: job_id
            for job_id, job in queue.items()
            if job.request_id is not None and job.request_id in wanted
        }

    async def _queue(self) -> dict[str, QueuedJob]:
        # All of this user's jobs in every state, in one call: naming ids with -j fails the
        # whole call once one of them has aged out of slurmctld's memory.
        done = await self._run(["squeue", "--me", "-h", "-t", "all", "-o", _SQUEUE_FORMAT])
        if not done.ok:
            raise ProvisionError(f"squeue: {done.error_text()}")
        return parse_squeue(done.stdout)

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        # A job cancelled before it started never read (and deleted) its token file.
        argv = ["sh", "-c", _CANCEL, "fluksio-cancel", job_id or "", token_file(request_id)]
        done = await self._run(argv)
        if not done.ok:
            what = f"scancel {job_id}" if job_id else f"removing request {request_id}'s token file"
            raise ProvisionError(f"{what}: {done.error_text()}")

    async def check(self) -> str:
        try:
            route = await self.shell.describe()
        except TransportError as exc:
            raise ProvisionError(exc.detail) from None
        done = await self._run(["sinfo", "-h", "-o", "%P %a %D %t"])
        if not done.ok:
            raise ProvisionError(f"sinfo: {done.error_text()}")
        partitions = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
        missing = missing_partitions(self.settings.profiles, partitions)
        if missing:
            raise ProvisionError("; ".join(missing))
        return "\n".join([*route.lines(), "sinfo:", done.stdout.rstrip("\n")]) + "\n"

    # A person's login is a capability of some shells only (the system ssh, sharing it).
    def login_command(self) -> list[str] | None:
        return self.shell.login_argv() if isinstance(self.shell, SharedLogin) else None

    async def login_needed(self) -> bool:
        return isinstance(self.shell, SharedLogin) and await self.shell.login_needed()

    async def logged_in(self) -> bool:
        return isinstance(self.shell, SharedLogin) and await self.shell.logged_in()

    async def logout(self) -> bool:
        return isinstance(self.shell, SharedLogin) and await self.shell.logout()

    async def close(self) -> None:
        if self._given_shell is not None or self._opened_shell is not None:
            await self.shell.close()

    async def _run(
        self, argv: list[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        try:
            return await self.shell.run(argv, stdin, once=once)
        except TransportError as exc:
            raise ProvisionError(
                exc.detail, uncertain=exc.may_have_run, login_needed=exc.login_needed
            ) from None


def _base64_of(ca_path: str) -> str:
    """The ``ca_file`` as one line for stdin, read afresh: a CA may be rotated."""
    path = Path(ca_path).expanduser()
    try:
        return base64.b64encode(path.read_bytes()).decode()
    except OSError as exc:
        raise ProvisionError(f"ca_file {path} cannot be read ({exc.strerror})") from None


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner[Any, Any]]]:
    return [SlurmProvisioner]
