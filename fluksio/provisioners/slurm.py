"""The built-in Slurm provisioner: a job whose payload is a worker dialling back.

The job script is a pure render (:func:`render_script`), tested as text. Everything that
comes from configuration and is data (URL, labels, names) is shell-quoted; ``prerun``
lines are commands by design (``module load``, ``source venv/bin/activate``); no field
may contain a control character, so nothing can add a line to the script. The worker's
token never appears in the script, argv or the job's environment: the script reads it
from a file written just before submission, and deletes it.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterable, Mapping

from pydantic import Field, field_validator

from fluksio.errors import FluksioError
from fluksio.provisioners.base import (
    JobState,
    Profile,
    Provisioner,
    ProvisionerSettings,
    Submission,
)
from fluksio.provisioners.hookspecs import hookimpl

__all__ = [
    "SLURM_STATES",
    "SlurmProfile",
    "SlurmProvisioner",
    "SlurmSettings",
    "SubmitError",
    "fluksio_provisioner_types",
    "parse_sbatch_parsable",
    "render_script",
    "slurm_state",
]

log = logging.getLogger(__name__)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

SLURM_STATES: Mapping[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "RESIZING": JobState.PENDING,
    "SUSPENDED": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "DEADLINE": JobState.TIMEOUT,
    "TIMEOUT": JobState.TIMEOUT,
    "PREEMPTED": JobState.FAILED,
    "FAILED": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "STOPPED": JobState.FAILED,
}
"""Slurm's job states (``squeue -o %T``) onto ours; anything else is UNKNOWN."""


class SubmitError(FluksioError):
    """A submission failed; carries what Slurm said."""

    def __init__(self, detail: str, *, argv: list[str], exit_code: int | None, stderr: str) -> None:
        super().__init__(detail)
        self.argv = argv
        self.exit_code = exit_code
        self.stderr = stderr


def slurm_state(text: str) -> JobState:
    state = SLURM_STATES.get(text.strip().split(" ")[0].rstrip("+"))
    if state is None:
        log.warning("unknown Slurm job state %r", text)
        return JobState.UNKNOWN
    return state


def _no_control(values: list[str], what: str) -> list[str]:
    for value in values:
        if _CONTROL.search(value):
            raise ValueError(f"{what} must not contain control characters (newlines, tabs)")
    return values


class SlurmProfile(Profile):
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


class SlurmSettings(ProvisionerSettings):
    login: str = Field(pattern=r"^[A-Za-z0-9._-]+@[A-Za-z0-9._-]+(:[0-9]{1,5})?$")
    """``user@host`` or ``user@host:port`` of the login node."""
    ssh_key: str = Field(min_length=1)
    known_hosts: str | None = None
    """Host keys to check against (default: the user's ``~/.ssh/known_hosts``)."""
    trust_on_first_use: bool = False
    """Accept and remember an unknown host key once; off by default."""
    worker_command: str = "fluksio-worker"
    profiles: list[SlurmProfile] = Field(min_length=1)  # type: ignore[assignment]

    @field_validator("engine_url", "worker_command")
    @classmethod
    def _single_line(cls, value: str) -> str:
        _no_control([value], "this field")
        return value


def render_script(settings: SlurmSettings, profile: SlurmProfile, *, token_file: str) -> str:
    """The job script for one machine of ``profile``: pure, exact, quoted."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={shlex.quote(f'fluksio-{settings.name}-{profile.name}')}",
        "#SBATCH --nodes=1",
    ]
    if profile.cpus:
        lines.append(f"#SBATCH --cpus-per-task={profile.cpus}")
    asks_gpus = any(o.startswith(("--gres", "--gpus", "-G")) for o in profile.sbatch)
    if profile.gpus and not asks_gpus:
        lines.append(f"#SBATCH --gpus={profile.gpus}")
    if profile.ram_mb:
        lines.append(f"#SBATCH --mem={profile.ram_mb}M")
    lines += [f"#SBATCH {option}" for option in profile.sbatch]
    lines += ["set -e", *profile.prerun]
    token_path = shlex.quote(token_file)
    lines += [
        "# The worker token: read from a file written at submission, then deleted.",
        f"FLUKSIO_WORKER_TOKEN=$(cat -- {token_path})",
        f"rm -f -- {token_path}",
        "export FLUKSIO_WORKER_TOKEN",
    ]
    worker = [
        settings.worker_command,
        "--url",
        settings.engine_url,
        "--name",
        f"{settings.name}-{profile.name}",
    ]
    if profile.labels:
        worker += ["--labels", ",".join(profile.labels)]
    if settings.max_idle_s:
        worker += ["--max-idle", f"{settings.max_idle_s:g}"]
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


class SlurmProvisioner(Provisioner):
    """Submits over SSH to a Slurm login node. (The SSH transport is not built yet.)"""

    type_name = "slurm"
    settings_model = SlurmSettings

    def render(self, profile: Profile, *, token_file: str) -> str:
        assert isinstance(self.settings, SlurmSettings) and isinstance(profile, SlurmProfile)
        return render_script(self.settings, profile, token_file=token_file)

    # The SSH transport (asyncssh behind one run(argv, stdin) seam) is the next step; until
    # it exists these say so instead of pretending.

    async def submit(self, profile: Profile, *, token: str) -> Submission:
        raise _not_yet("sbatch")

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobState]:
        raise _not_yet("squeue")

    async def cancel(self, job_id: str) -> None:
        raise _not_yet("scancel")


def _not_yet(command: str) -> SubmitError:
    return SubmitError(
        "submitting to Slurm is not available yet: the SSH transport is not built",
        argv=[command],
        exit_code=None,
        stderr="",
    )


@hookimpl
def fluksio_provisioner_types() -> list[type[Provisioner]]:
    return [SlurmProvisioner]
