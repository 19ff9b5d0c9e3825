"""One base for batch systems reached over SSH: a backend fills in a template.

A batch system (Slurm, Grid Engine, PBS, LSF, HTCondor, a lab's own queue) is driven the
same way everywhere: a job script submitted on a login node with the worker's token
beside it, one command that lists all of the user's jobs, a command that cancels one, a
command that describes the site. :class:`BatchProvisioner` does all of that once: the
shell (opened from :class:`~fluksio.provisioners.SSHAccess`, timed for the engine),
delivering the token on stdin, one error shape for every command, polling every job with
one command, finding a job whose submission lost its answer by its mark, cancelling
(and removing what a cancelled job never read), ``check``, ``close``, and
``"route": "login"`` for compute nodes with no route out.

A backend declares only what differs; each member below says its contract the way a
hookspec does. The Grid Engine plugin (``plugins/gridengine/``) is a whole example, and
``docs/writing-a-provisioner.md`` walks through it.
"""

from __future__ import annotations

import re
import secrets
import shlex
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import Field, field_validator

from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobStatus,
    ProfileSettings,
    ProvisionError,
    ProvisionerSettings,
    Submission,
    exec_worker,
)
from fluksio.provisioners.provisioner import Provisioner
from fluksio.provisioners.ssh_access import (
    LOGIN_PATTERN,
    SSHAccess,
    delivering,
    no_control,
    run_remote,
    token_file,
)
from fluksio.provisioners.way_in import WayIn
from fluksio.ssh.shell import Completed, RemoteShell, TransportError

__all__ = [
    "JOB_OUTPUT_DIR",
    "BatchProfile",
    "BatchProvisioner",
    "BatchSettings",
    "QueuedJob",
    "batch_options",
    "worker_line",
]

JOB_OUTPUT_DIR = ".fluksio/jobs"
"""A directory under the login user's home that exists before every submission, where a
job script may send its job's output (one file per job)."""
_SUBMIT = (files("fluksio.provisioners") / "batch_submit.sh").read_text(encoding="utf-8")
"""The program around a backend's submit command (``batch_submit.sh``)."""
_CANCEL = (files("fluksio.provisioners") / "batch_cancel.sh").read_text(encoding="utf-8")
"""The program around a backend's cancel command (``batch_cancel.sh``)."""
_TOLERATE = """    case "$said" in {gone}) status=0 ;; esac
"""


class BatchProfile(ProfileSettings):
    """A profile of a batch system; a backend adds its submit options (``sbatch``,
    ``qsub``), validated with :func:`batch_options`."""

    prerun: list[str] = Field(default_factory=list)
    """Shell lines run before the worker starts (``module load``, ``source
    venv/bin/activate``): they own the environment."""

    @field_validator("prerun")
    @classmethod
    def _prerun_lines(cls, values: list[str]) -> list[str]:
        return no_control(values, "prerun lines")


def batch_options(values: list[str], what: str) -> list[str]:
    """Submit options of a profile, one option (with its value) per entry, as they go into
    the job script: no control character, each starting with ``-``. ``what`` names one in
    the error (``"a qsub option"``)."""
    for value in no_control(values, f"{what.split(maxsplit=1)[1]}s"):
        if not value.startswith("-"):
            raise ValueError(f"{value!r} is not {what} (it starts with -)")
    return values


BatchProfileT = TypeVar("BatchProfileT", bound=BatchProfile)


class BatchSettings(SSHAccess, ProvisionerSettings[BatchProfileT], Generic[BatchProfileT]):
    """``provisioners.json`` of a batch system over SSH: the SSH options (the login route
    among them), the engine's, ``login`` and ``settings_file``; a backend adds its own."""

    login: str = Field(pattern=LOGIN_PATTERN)
    """``user@host[:port]`` of the login (submit) node, or a ``Host`` alias of
    ``ssh_config``."""
    settings_file: str | None = Field(default=None, pattern=r"^[^\x00-\x1f\x7f]+$")
    """A file sourced before every command on the login node (a Grid Engine cell's
    ``settings.sh``, a site's module setup), for sites whose commands are not on a
    non-interactive shell's ``PATH``."""


@dataclass(frozen=True)
class QueuedJob:
    """One job of the queue command's answer: its status, and the request it is marked
    with (None: not one of ours)."""

    status: JobStatus
    request_id: str | None


def worker_line(
    settings: BatchSettings[Any], profile: ProfileSettings, connect_to: str | None = None
) -> str:
    """A job script's last line: ``exec`` of the profile's worker (:func:`worker_argv`),
    quoted, dialling ``connect_to`` (``HOST:PORT``, the login route) when given, still
    verifying the engine's own name."""
    return exec_worker(settings.worker_command, settings, profile, connect_to)


BatchSettingsT = TypeVar("BatchSettingsT", bound=BatchSettings[Any])
Command = str | Sequence[str]
"""A command on the login node: shell text (run by ``sh``, after :meth:`~BatchProvisioner.
program`), or an argv run as it is."""


class BatchProvisioner(Provisioner[BatchSettingsT, BatchProfileT]):
    """Base of every batch system reached over SSH.

    ``shell`` is where its commands run: by default SSH to ``settings.login``, opened on
    first use; tests hand in scripted replies. A subclass sets ``type_name``,
    ``settings_model``, ``job_noun`` and the members under "what a backend declares".
    """

    # -- what a backend declares ---------------------------------------------------------

    submit_command: ClassVar[str]
    """Shell text that submits the job script it reads on stdin and prints the job id (and
    nothing else on stdout): ``"sbatch --parsable"``. It runs after the worker's token is
    written to its file, in the same round trip, at most once (a dropped connection is not
    retried: the job may be queued). A non-zero exit is a refusal; its stderr is the
    sentence (see :meth:`refusal`)."""

    queue_command: ClassVar[Command]
    """Lists all of the login user's jobs, in every state the system still shows, in one
    call (naming job ids fails once one has aged out of some systems' memory). Its stdout
    goes to :meth:`parse_queue`; a non-zero exit is an error named by its first word."""

    cancel_command: ClassVar[str]
    """Shell text that cancels the job whose id follows it as one argument:
    ``"scancel --"``. Run only for a known job id; the token file is removed after it
    either way."""

    hold_option: ClassVar[str | None] = None
    """The option of ``submit_command`` that submits the job held, so that it never starts
    (``"--hold"``, ``"-h"``): with it, ``fluksio provisioners check --submit`` submits a
    test job of each profile and withdraws it (:meth:`try_submission`). None: the check
    says this backend cannot."""

    cancel_gone: ClassVar[tuple[str, ...]] = ()
    """What ``cancel_command`` prints when the job already ended (``("does not exist",)``):
    such a cancel succeeds quietly, as the engine's contract asks."""

    site_command: ClassVar[Command]
    """What ``fluksio provisioners check --ssh`` asks of the site (``sinfo``, ``qconf
    -sql``); its stdout goes to :meth:`read_site`."""

    @abstractmethod
    def job_script(self, profile: BatchProfileT, *, request_id: str, connect_to: str | None) -> str:
        """The job script for one machine of ``profile``: pure text, every value from
        configuration quoted, ending in ``exec`` of the worker's command line.

        Mark the job with ``request_id`` where :meth:`parse_queue` can read it back (a
        comment, the job's name). Read the token with :func:`token_lines` (never write
        it). End with :func:`worker_line`, which hands the worker ``connect_to`` (the
        login route's address) when it is not None.
        """

    job_id_pattern: ClassVar[str] = r"(?P<job_id>\d+)"
    """Where the job id is in what ``submit_command`` printed, for the default
    :meth:`parse_job_id`: a regular expression whose group ``job_id`` (else the whole
    match) is the id, its first match counting. By default the first number:
    ``41;cluster`` (``sbatch --parsable``), ``41.server`` (PBS), ``Job <41> is
    submitted`` (LSF)."""

    def parse_job_id(self, stdout: str) -> str:
        """The job id in what ``submit_command`` printed, found by :attr:`job_id_pattern`;
        ValueError saying what was printed instead. Override it when a pattern is not
        enough."""
        found = re.search(self.job_id_pattern, stdout)
        if found is None:
            printed = stdout.strip()[:200] or "nothing"
            raise ValueError(f"{_word(self.submit_command)} printed no job id: {printed!r}")
        return found.groupdict().get("job_id") or found.group(0)

    @abstractmethod
    def parse_queue(self, stdout: str) -> Mapping[str, QueuedJob]:
        """``queue_command``'s answer as job id -> :class:`QueuedJob`: our state for the
        system's (its table of states, with why for each odd one, beside the parser), its
        reason, and the request the job was marked with. Raise ValueError for an answer
        that cannot be read. A job it leaves out has ended."""

    @abstractmethod
    def read_site(self, stdout: str) -> list[str]:
        """What ``site_command`` said, as lines for ``check``; raise
        :class:`ProvisionError` naming every profile the site cannot serve (a partition
        or queue it does not have)."""

    def refusal(self, said: str) -> str:
        """A refused submission's words (its stderr), trimmed of the system's own framing
        (``sbatch: error:``); as they are by default."""
        return said

    def program(self, text: str) -> str:
        """Shell text as it runs on the login node: after the ``settings_file``, if the
        settings name one."""
        if self.settings.settings_file is None:
            return text
        return f". {shlex.quote(self.settings.settings_file)} || exit\n{text}"

    # -- what the base does --------------------------------------------------------------

    def __init__(
        self, settings: BatchSettingsT, shell: RemoteShell | None = None, **given: Any
    ) -> None:
        super().__init__(settings, **given)
        self._shell = shell
        self.way_in = WayIn(self, lambda: self.shell, login=settings.login)
        """The login route (``"route": "login"``); unused with ``direct``."""

    @property
    def shell(self) -> RemoteShell:
        """Where its commands run; SSH is opened on first use, once :attr:`state_dir` is
        known (the shared connection's socket lives there)."""
        if self._shell is None:
            control = self.state_dir / "ssh" if self.state_dir is not None else None
            self._shell = self.settings.open_shell(
                self.settings.login,
                None,
                control,
                on_command=self.command_ran,
                clock=self.clock,
            )
        return self._shell

    def render(self, profile: BatchProfileT, *, request_id: str) -> str:
        return self.job_script(profile, request_id=request_id, connect_to=self.way_in.planned())

    async def submit(self, profile: BatchProfileT, *, request_id: str, token: str) -> Submission:
        with self.way_in.submitting():
            connect_to = await self.way_in.connect_to()
            script = self.job_script(profile, request_id=request_id, connect_to=connect_to)
            delivery = delivering(
                self.settings, self.name, request_id=request_id, token=token, name="fluksio-submit",
                program=self.program(self._submit_text()), then=script,
            )  # fmt: skip
            done = await self.run(delivery.argv, delivery.stdin, once=True)
        if not done.ok:
            said = self.refusal(done.error_text())
            raise ProvisionError(f"{_word(self.submit_command)} refused the job: {said}")
        try:
            return Submission(job_id=self.parse_job_id(done.stdout), profile=profile.name)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None

    async def try_submission(self, profile: BatchProfileT) -> str | None:
        if self.hold_option is None:
            raise ProvisionError(
                f"a {self.type_name} provisioner cannot hold a test job (its hold_option is"
                " not declared)"
            )
        request_id = f"check-{secrets.token_hex(6)}"
        # Its token file would be read at the job's start, which a held job never reaches.
        script = self.job_script(profile, request_id=request_id, connect_to=None)
        held = f"{self.submit_command} {self.hold_option}"
        # ``$1`` as for a real submission: where its token file would be (there is none).
        argv = ["sh", "-c", self.program(held), "fluksio-submit", token_file(request_id)]
        done = await self.run(argv, script, once=True)
        if not done.ok:
            said = self.refusal(done.error_text())
            raise ProvisionError(f"{_word(self.submit_command)} refused the job: {said}")
        try:
            job_id = self.parse_job_id(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None
        await self.cancel(job_id, request_id=request_id)
        return f"{self.job_noun} {job_id} was taken, held and withdrawn"

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        wanted = set(job_ids)
        if not wanted:
            return {}
        statuses = {job_id: job.status for job_id, job in (await self.queue()).items()
                    if job_id in wanted}  # fmt: skip
        alive = any(status.state not in TERMINAL_STATES for status in statuses.values())
        await self.way_in.keep(alive)
        return statuses

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        wanted = set(request_ids)
        if not wanted:
            return {}
        # One job per mark: a submission is never sent twice.
        return {
            job.request_id: job_id
            for job_id, job in (await self.queue()).items()
            if job.request_id is not None and job.request_id in wanted
        }

    async def queue(self) -> Mapping[str, QueuedJob]:
        """All of the user's jobs, by :attr:`queue_command` (one round trip)."""
        done = await self.run(self._argv(self.queue_command))
        if not done.ok:
            raise ProvisionError(f"{_word(self.queue_command)}: {done.error_text()}")
        try:
            return self.parse_queue(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        gone = "|".join(f"*{shlex.quote(words)}*" for words in self.cancel_gone)
        tolerate = _TOLERATE.format(gone=gone) if gone else ""
        text = _CANCEL.format(command=self.cancel_command, tolerate=tolerate)
        argv = ["sh", "-c", self.program(text), "fluksio-cancel", job_id or ""]
        done = await self.run([*argv, token_file(request_id)])
        if not done.ok:
            what = (
                f"{_word(self.cancel_command)} {job_id}" if job_id
                else f"removing request {request_id}'s token file"
            )  # fmt: skip
            raise ProvisionError(f"{what}: {done.error_text()}")

    async def check(self) -> str:
        try:
            route = await self.shell.describe()
        except TransportError as exc:
            raise ProvisionError(exc.detail) from None
        done = await self.run(self._argv(self.site_command))
        if not done.ok:
            raise ProvisionError(f"{_word(self.site_command)}: {done.error_text()}")
        site = self.read_site(done.stdout)
        said = [*route.lines(), *await self.way_in.check(route.destination), *site]
        return "\n".join(said) + "\n"

    async def close(self) -> None:
        await self.way_in.stop()
        if self._shell is not None:
            await self._shell.close()

    def reach(self) -> str:
        return self.way_in.reach() or super().reach()

    def path_down(self) -> str | None:
        return self.way_in.path_down()

    async def run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        """Run ``argv`` on the login node; SSH's failure is the :class:`ProvisionError`
        the engine reads (``uncertain`` when it may have run)."""
        return await run_remote(self.shell, argv, stdin, once=once)

    def run_shell(self, text: str, *args: str) -> list[str]:
        """The argv that runs shell ``text`` (after :meth:`program`) with ``args`` as
        ``$1``...: for a backend's own extra command."""
        return ["sh", "-c", self.program(text), f"fluksio-{_word(text)}", *args]

    def _submit_text(self) -> str:
        return _SUBMIT.format(jobs=JOB_OUTPUT_DIR, command=self.submit_command)

    def _argv(self, command: Command) -> list[str]:
        if isinstance(command, str):
            return ["sh", "-c", self.program(command)]
        if self.settings.settings_file is None:
            return list(command)
        return ["sh", "-c", self.program('exec "$@"'), f"fluksio-{_word(command)}", *command]


def _word(command: Command) -> str:
    """The program a command runs, for sentences: ``squeue: ...``."""
    return (command.split() if isinstance(command, str) else list(command))[0]
