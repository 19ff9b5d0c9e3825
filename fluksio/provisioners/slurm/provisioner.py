"""The Slurm provisioner: ``sbatch``, ``squeue``, ``scancel`` and ``sinfo`` over SSH."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from importlib.resources import files
from pathlib import Path

from fluksio.provisioners.base import (
    JobStatus,
    Provisioner,
    ProvisionError,
    Submission,
)
from fluksio.provisioners.slurm.options import missing_partitions
from fluksio.provisioners.slurm.script import (
    SQUEUE_FORMAT,
    QueuedJob,
    ca_file,
    parse_sbatch_parsable,
    parse_squeue,
    render_script,
    token_file,
)
from fluksio.provisioners.slurm.settings import SlurmProfile, SlurmSettings
from fluksio.ssh import open_transport
from fluksio.ssh.shell import Completed, RemoteShell, TransportError

__all__ = ["SlurmProvisioner"]

# The two programs that run on the login node, kept as the shell scripts they are.
_SUBMIT = (files(__package__) / "submit.sh").read_text(encoding="utf-8")
_CANCEL = (files(__package__) / "cancel.sh").read_text(encoding="utf-8")


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
        done = await self._run(["squeue", "--me", "-h", "-t", "all", "-o", SQUEUE_FORMAT])
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
