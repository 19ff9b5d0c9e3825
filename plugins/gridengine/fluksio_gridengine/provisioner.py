"""The Grid Engine provisioner: ``qsub``, ``qstat``, ``qdel`` and ``qconf`` over SSH."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from importlib.resources import files

from fluksio.provisioners import (
    Completed,
    JobState,
    JobStatus,
    Provisioner,
    ProvisionError,
    RemoteShell,
    Submission,
    TransportError,
    delivering,
    run_remote,
    token_file,
)
from fluksio_gridengine.script import (
    QueuedJob,
    error_reasons,
    parse_qstat,
    parse_qsub,
    render_script,
)
from fluksio_gridengine.settings import GridEngineProfile, GridEngineSettings

__all__ = ["GridEngineProvisioner"]

_SUBMIT, _DELETE = (
    (files(__package__) / f"{name}.sh").read_text(encoding="utf-8") for name in ("submit", "delete")
)
_QSTAT = 'qstat -xml -u "$(id -un)"'
# The cell's queues, then its parallel environments (a cell may have none), in one round
# trip.
_CELL = 'qconf -sql && echo "#pe" && { qconf -spl 2>/dev/null || true; }'


class GridEngineProvisioner(Provisioner[GridEngineSettings, GridEngineProfile]):
    """Submits to a Grid Engine cell through a remote shell on one of its submit hosts.

    ``shell`` is where the commands run: by default SSH to ``login``; tests hand it
    scripted replies.
    """

    type_name = "gridengine"
    settings_model = GridEngineSettings
    job_noun = "Grid Engine job"

    def __init__(self, settings: GridEngineSettings, shell: RemoteShell | None = None) -> None:
        super().__init__(settings)
        self._shell = shell

    @property
    def shell(self) -> RemoteShell:
        """Where its commands run; SSH is opened on first use, once :attr:`state_dir` is
        known (the shared connection's socket lives there)."""
        if self._shell is None:
            control = self.state_dir / "ssh" if self.state_dir is not None else None
            self._shell = self.settings.open_shell(self.settings.login, None, control)
            self._shell.on_command = self._command_done
        return self._shell

    def _command_done(self, program: str, seconds: float, reached: bool) -> None:
        if self.on_command is not None:
            self.on_command(program, seconds, reached)

    def render(self, profile: GridEngineProfile, *, request_id: str) -> str:
        return render_script(self.settings, profile, request_id=request_id)

    def walltime_s(self, profile: GridEngineProfile) -> float | None:
        return profile.runtime_s

    async def submit(
        self, profile: GridEngineProfile, *, request_id: str, token: str
    ) -> Submission:
        delivery = delivering(
            self.settings,
            self.name,
            request_id=request_id,
            token=token,
            program=self._program(_SUBMIT),
            name="fluksio-submit",
            then=self.render(profile, request_id=request_id),
        )
        done = await self._run(delivery.argv, delivery.stdin, once=True)
        if not done.ok:
            # "Unable to run job: Job was rejected because ...\nExiting.": its words, once.
            said = done.error_text().replace("Unable to run job: ", "")
            said = said.removesuffix("Exiting.").strip().removesuffix(";").strip()
            raise ProvisionError(f"qsub refused the job: {said}")
        try:
            job_id = parse_qsub(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None
        return Submission(job_id=job_id, profile=profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        wanted = set(job_ids)
        if not wanted:
            return {}
        queue = await self._queue()
        statuses = {job_id: job.status for job_id, job in queue.items() if job_id in wanted}
        for job_id, status in statuses.items():
            if status.state is JobState.FAILED:
                # A job in error shows why only in `qstat -j`: asked for those alone.
                argv = ["sh", "-c", self._program('qstat -j "$1"'), "fluksio-qstat", job_id]
                done = await self._run(argv)
                reason = error_reasons(done.stdout)
                if reason is not None:
                    statuses[job_id] = JobStatus(status.state, status.native, reason)
        return statuses

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        wanted = set(request_ids)
        if not wanted:
            return {}
        return {
            job.request_id: job_id
            for job_id, job in (await self._queue()).items()
            if job.request_id is not None and job.request_id in wanted
        }

    async def _queue(self) -> dict[str, QueuedJob]:
        # All of this user's jobs in one call; an ended job is no longer listed.
        done = await self._run(["sh", "-c", self._program(_QSTAT)])
        if not done.ok:
            raise ProvisionError(f"qstat: {done.error_text()}")
        try:
            return parse_qstat(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        program = self._program(_DELETE)
        argv = ["sh", "-c", program, "fluksio-delete", job_id or "", token_file(request_id)]
        done = await self._run(argv)
        if not done.ok:
            what = f"qdel {job_id}" if job_id else f"removing request {request_id}'s token file"
            raise ProvisionError(f"{what}: {done.error_text()}")

    async def check(self) -> str:
        try:
            route = await self.shell.describe()
        except TransportError as exc:
            raise ProvisionError(exc.detail) from None
        done = await self._run(["sh", "-c", self._program(_CELL)])
        if not done.ok:
            raise ProvisionError(f"qconf: {done.error_text()}")
        queues_text, _, pes_text = done.stdout.partition("#pe\n")
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
        said = [*route.lines(), f"queues: {' '.join(queues)}"]
        said.append(f"parallel environments: {' '.join(pes)}")
        return "\n".join(said) + "\n"

    async def close(self) -> None:
        if self._shell is not None:
            await self._shell.close()

    def _program(self, text: str) -> str:
        """``text`` run after the site's ``settings_file``, if it names one."""
        if self.settings.settings_file is None:
            return text
        return f". {shlex.quote(self.settings.settings_file)} || exit\n{text}"

    async def _run(
        self, argv: list[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        return await run_remote(self.shell, argv, stdin, once=once)
