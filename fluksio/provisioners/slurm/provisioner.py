"""The Slurm provisioner: ``sbatch``, ``squeue``, ``scancel`` and ``sinfo`` over SSH."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib.resources import files

from fluksio.clock import SYSTEM_CLOCK
from fluksio.provisioners.base import (
    TERMINAL_STATES,
    JobStatus,
    Provisioner,
    ProvisionError,
    Submission,
)
from fluksio.provisioners.login_route import RELAY_MARK, LoginRoute, RouteDown
from fluksio.provisioners.slurm.options import missing_partitions
from fluksio.provisioners.slurm.script import (
    SQUEUE_FORMAT,
    QueuedJob,
    parse_sbatch_parsable,
    parse_squeue,
    render_script,
    token_file,
)
from fluksio.provisioners.slurm.settings import SlurmProfile, SlurmSettings
from fluksio.provisioners.ssh_access import delivering, run_remote
from fluksio.ssh import parse_login
from fluksio.ssh.shell import Completed, Forwarding, RemoteShell, TransportError

__all__ = ["SlurmProvisioner"]

# The two programs that run on the login node, kept as the shell scripts they are.
_SUBMIT = (files(__package__) / "submit.sh").read_text(encoding="utf-8")
_CANCEL = (files(__package__) / "cancel.sh").read_text(encoding="utf-8")
# The login node's python3 and this provisioner's relays (``ps``: pid, seconds, argv).
_ROUTE_CHECK = (
    "python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo;"
    ' ps -u "$(id -u)" -o pid=,etimes=,args= | grep -F -- " fluksio-relay $1 " | grep -v grep;'
    " exit 0"
)
ROUTE_WAIT_S = 30.0
"""How long a submission waits for the login route to come up before it fails (and the
profile rests, as after any failed submission)."""


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
        self._route: LoginRoute | None = None
        self._submitting = 0

    @property
    def shell(self) -> RemoteShell:
        """Where its commands run; SSH is opened on first use, once :attr:`state_dir` is
        known (the shared connection's socket lives there)."""
        if self._given_shell is not None:
            return self._given_shell
        if self._opened_shell is None:
            self._opened_shell = self.settings.open_shell(
                self.settings.login,
                None,
                self.state_dir / "ssh" if self.state_dir is not None else None,
            )
            self._opened_shell.on_command = self._command_done
        return self._opened_shell

    def _command_done(self, program: str, seconds: float, reached: bool) -> None:
        if self.on_command is not None:
            self.on_command(program, seconds, reached)

    def render(self, profile: SlurmProfile, *, request_id: str) -> str:
        connect_to = None
        if self.settings.route == "login":
            address = self._route.address if self._route is not None else None
            host = self.settings.login_address or parse_login(self.settings.login)[1]
            connect_to = f"{host}:{address[1] if address else 'PORT'}"
        return render_script(self.settings, profile, request_id=request_id, connect_to=connect_to)

    def walltime_s(self, profile: SlurmProfile) -> float | None:
        return profile.time_limit_s

    async def submit(self, profile: SlurmProfile, *, request_id: str, token: str) -> Submission:
        self._submitting += 1
        try:
            submission = await self._submit(profile, request_id=request_id, token=token)
        finally:
            self._submitting -= 1
        return submission

    async def _submit(self, profile: SlurmProfile, *, request_id: str, token: str) -> Submission:
        connect_to = None
        if self.settings.route == "login":
            host, port = await self._route_address()
            connect_to = f"{host}:{port}"
        script = render_script(self.settings, profile, request_id=request_id, connect_to=connect_to)
        delivery = delivering(
            self.settings, self.name, request_id=request_id, token=token,
            program=_SUBMIT, name="fluksio-submit", then=script,
        )  # fmt: skip
        done = await self._run(delivery.argv, stdin=delivery.stdin, once=True)
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
        statuses = {job_id: job.status for job_id, job in queue.items() if job_id in wanted}
        await self._keep_route(
            any(status.state not in TERMINAL_STATES for status in statuses.values())
        )
        return statuses

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
        said = [*route.lines()]
        if self.settings.route == "login":
            said += await self._check_route(route.destination)
        return "\n".join([*said, "sinfo:", done.stdout.rstrip("\n")]) + "\n"

    async def _check_route(self, destination: str) -> list[str]:
        """The login route as the login node shows it: its Python, and a relay running."""
        done = await self._run(["sh", "-c", _ROUTE_CHECK, "fluksio-route-check", self.name])
        facts = done.stdout.splitlines()
        python = facts[0] if facts else ""
        if not python.startswith("3.") or tuple(map(int, python.split(".")[:2])) < (3, 6):
            raise ProvisionError(
                f'"route": "login" runs a relay with the login node\'s python3, which must be'
                f" 3.6 or newer; it has {python or 'none'}"
            )
        host = self.settings.login_address or parse_login(destination)[1]
        port_file = self.state_dir / "route-port" if self.state_dir is not None else None
        port = port_file.read_text().strip() if port_file and port_file.exists() else None
        port = port or "(a port chosen when a job first needs it)"
        lines = [f"route: login; jobs' workers connect to {host}:{port}"]
        lines.append(f"relay python3: {python}")
        relays = [line.split() for line in facts[1:] if RELAY_MARK in line.split()]
        lines += [f"relay: running (pid {fields[0]}, for {fields[1]} s)" for fields in relays]
        if not relays:
            lines.append("relay: none running (the engine starts one while it has jobs)")
        return lines

    async def close(self) -> None:
        if self._route is not None:
            await self._route.stop()
        if self._given_shell is not None or self._opened_shell is not None:
            await self.shell.close()

    # -- the login route ------------------------------------------------------------------

    def reach(self) -> str:
        if self.settings.route == "direct":
            return super().reach()
        host = (
            self.settings.login_address
            or f"{parse_login(self.settings.login)[1]} (as SSH resolves it)"
        )
        return f"through the login node, at {host}, verifying {self.settings.engine_url}"

    def path_down(self) -> str | None:
        return self._route.down_sentence() if self._route is not None else None

    def _path_changed(self) -> None:
        if self.on_path_change is not None:
            self.on_path_change()

    async def _keep_route(self, jobs_alive: bool) -> None:
        """Keep the login route while any job may still run (a poll answers for all of
        them); take it down after the last, unless a submission is under way."""
        if self.settings.route != "login":
            return
        if jobs_alive:
            (await self._login_route()).keep()
        elif self._route is not None and not self._submitting:
            await self._route.stop()

    async def _route_address(self) -> tuple[str, int]:
        try:
            return await (await self._login_route()).ready(ROUTE_WAIT_S)
        except RouteDown as down:
            raise ProvisionError(down.sentence, login_needed=down.login_needed) from None

    async def _login_route(self) -> LoginRoute:
        if self._route is None:
            shell = self.shell
            if not isinstance(shell, Forwarding):
                raise ProvisionError('"route": "login" needs an SSH transport that forwards')
            host = self.settings.login_address
            if host is None:
                try:
                    destination = (await shell.describe()).destination
                except TransportError as exc:
                    raise ProvisionError(exc.detail) from None
                host = parse_login(destination)[1]
            self._route = LoginRoute(
                shell,
                label=self.name,
                login_host=host,
                engine=lambda: self.engine_address,
                clock=SYSTEM_CLOCK,
                port_file=self.state_dir / "route-port" if self.state_dir is not None else None,
                on_change=self._path_changed,
            )
        return self._route

    async def _run(
        self, argv: list[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        return await run_remote(self.shell, argv, stdin, once=once)
