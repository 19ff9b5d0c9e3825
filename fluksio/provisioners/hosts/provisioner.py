"""Machines you own, a worker started on one over SSH when a call needs it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Iterable, Mapping
from importlib.resources import files
from typing import Any

from fluksio.provisioners.base import JobStatus, ProvisionError, Submission
from fluksio.provisioners.hosts.script import (
    job_id,
    parse_find,
    parse_poll,
    render_script,
    split_job_id,
)
from fluksio.provisioners.hosts.settings import HostProfile, HostsSettings
from fluksio.provisioners.provisioner import Provisioner
from fluksio.provisioners.ssh_access import delivering, run_remote
from fluksio.provisioners.way_in import WayIn
from fluksio.ssh.shell import Completed, RemoteShell, TransportError

__all__ = ["HostsProvisioner"]


def _program(name: str) -> str:
    return (files(__package__) / name).read_text(encoding="utf-8")


_START, _POLL, _FIND, _STOP = (_program(f"{n}.sh") for n in ("start", "poll", "find", "stop"))
_WITH_BASH = 'shell=$(command -v bash || echo sh); exec "$shell" -c "$1" fluksio-check "$2"'


class HostsProvisioner(Provisioner[HostsSettings, HostProfile]):
    """Starts one ``fluksio-worker`` on a host over SSH, detached; stops it when asked.

    ``shells`` are where each host's commands run (by host name): by default SSH to its
    ``login``; tests hand in scripted ones.
    """

    type_name = "ssh"
    settings_model = HostsSettings
    job_noun = "worker"

    def __init__(
        self,
        settings: HostsSettings,
        shells: Mapping[str, RemoteShell] | None = None,
        **given: Any,
    ) -> None:
        super().__init__(settings, **given)
        self._shells: dict[str, RemoteShell] = dict(shells or {})
        self._ways = {
            p.name: WayIn(self, functools.partial(self.shell_of, p.name), login=p.login,
                          on_own_host=True, port_file=f"route-port-{p.name}")
            for p in settings.profiles
        }  # fmt: skip
        """Each host's login route (``"route": "login"``): its worker dials the host's own
        loopback, forwarded over the host's SSH connection."""
        self._kept: set[str] | None = None
        """Workers started, found or polled alive, not known to have ended (job ids): what
        a stopping engine stops. Kept in :attr:`state_dir` too, so an engine that was
        killed stops at its own shutdown what it adopted, polled or not."""

    def starting(self, profile: HostProfile) -> str:
        return f"starting a worker on {profile.name}"

    def shell_of(self, host: str) -> RemoteShell:
        """The host's shell, opened on first use (its shared connection under
        :attr:`state_dir`)."""
        if host not in self._shells:
            profile = self.profile(host)
            control = self.state_dir / f"ssh-{host}" if self.state_dir is not None else None
            self._shells[host] = self.settings.open_shell(
                profile.login,
                profile.ssh_key,
                control,
                on_command=self.command_ran,
                clock=self.clock,
            )
        return self._shells[host]

    def render(self, profile: HostProfile, *, request_id: str) -> str:
        connect_to = self._ways[profile.name].planned()
        return render_script(self.settings, profile, request_id=request_id, connect_to=connect_to)

    async def submit(self, profile: HostProfile, *, request_id: str, token: str) -> Submission:
        way = self._ways[profile.name]
        with way.submitting():
            connect_to = await way.connect_to()
            script = render_script(
                self.settings, profile, request_id=request_id, connect_to=connect_to
            )
            delivery = delivering(
                self.settings, self.name, request_id=request_id, token=token, program=_START,
                name="fluksio-start", args=[request_id], then=script,
            )  # fmt: skip
            done = await self._run(profile.name, delivery.argv, delivery.stdin, once=True)
        words = done.stdout.split()
        if not done.ok or len(words) != 2 or not words[0].isdigit():
            raise ProvisionError(f"{profile.name} did not start a worker: {done.error_text()}")
        started = job_id(profile.name, int(words[0]))
        self._kept_workers({started})
        return Submission(job_id=started, profile=profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        by_host: dict[str, list[int]] = {}
        for value in job_ids:
            parsed = split_job_id(value)
            if parsed is not None:
                by_host.setdefault(parsed[0], []).append(parsed[1])
        statuses: dict[str, JobStatus] = {}
        for host, pids in by_host.items():
            argv = ["sh", "-c", _POLL, "fluksio-poll", *map(str, pids)]
            done = await self._run(host, argv)
            if not done.ok:
                raise ProvisionError(f"{host}: polling failed: {done.error_text()}")
            polled_here = {job_id(host, p.pid): p.status for p in parse_poll(done.stdout)}
            statuses.update(polled_here)
            await self._ways[host].keep(any(s.native == "RUNNING" for s in polled_here.values()))
        alive = {job for job, status in statuses.items() if status.native == "RUNNING"}
        self._kept_workers(alive, ended=set(statuses) - alive)
        return statuses

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        wanted = set(request_ids)
        found: dict[str, str] = {}
        for host in (p.name for p in self.settings.profiles):
            if not wanted - set(found):
                break
            with contextlib.suppress(ProvisionError):  # an unreachable host has none to give
                done = await self._run(host, ["sh", "-c", _FIND, "fluksio-find"])
                for request, pid in parse_find(done.stdout).items():
                    if request in wanted:
                        found[request] = job_id(host, pid)
        self._kept_workers(set(found.values()))
        return found

    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        parsed = split_job_id(job_id) if job_id else None
        # Without a job, the start's answer was lost: whichever host it reached cleans up.
        hosts = [parsed[0]] if parsed else [p.name for p in self.settings.profiles]
        for host in hosts:
            await self._stop(host, request_id, parsed[1] if parsed else None)
        if job_id:
            self._kept_workers(set(), ended={job_id})

    async def _stop(self, host: str, request_id: str, pid: int | None) -> None:
        argv = ["sh", "-c", _STOP, "fluksio-stop", request_id, str(pid or "")]
        done = await self._run(host, argv)
        if not done.ok:
            raise ProvisionError(f"{host}: stopping its worker: {done.error_text()}")

    async def check(self) -> str:
        said = []
        for profile in self.settings.profiles:
            try:
                route = await self.shell_of(profile.name).describe()
            except TransportError as exc:
                raise ProvisionError(f"{profile.name}: {exc.detail}") from None
            # After its prerun lines, as its worker would be started (bash where there is).
            found = "\n".join([*profile.prerun, 'command -v -- "$1"'])
            argv = ["sh", "-c", _WITH_BASH, "fluksio-check", found, self.settings.worker_command]
            done = await self._run(profile.name, argv)
            if not done.ok:
                raise ProvisionError(
                    f"{profile.name}: {self.settings.worker_command} is not found there"
                    " (install fluksio-worker, or name it in worker_command or prerun)"
                )
            lines = [*route.lines(), *await self._ways[profile.name].check(route.destination)]
            said += [f"{profile.name}:", *(f"  {line}" for line in lines)]
        return "\n".join(said) + "\n"

    def reach(self) -> str:
        return next(iter(self._ways.values())).reach() or super().reach()

    def path_down(self) -> str | None:
        downs = [f"{host}: {down}" for host, way in self._ways.items() if (down := way.path_down())]
        return "; ".join(downs) or None

    async def close(self) -> None:
        # Workers started here stop with the engine (a SIGKILLed engine's are adopted by
        # the next): nothing else would ever stop them. Only an instance the engine's
        # provisioning started (it has a link) stops them: `fluksio provisioners check
        # --ssh` opens another on the same state directory, never started, and closing
        # it must not stop the running engine's workers.
        running = sorted(self._kept_workers(set())) if self.link is not None else []
        for started in running:
            parsed = split_job_id(started)
            if parsed is not None:
                with contextlib.suppress(ProvisionError):
                    await self._stop(parsed[0], "", parsed[1])
                    self._kept_workers(set(), ended={started})
        for way in self._ways.values():
            await way.stop()
        shells, self._shells = list(self._shells.values()), {}
        await asyncio.gather(*(shell.close() for shell in shells), return_exceptions=True)

    def _kept_workers(
        self, started: set[str], *, ended: frozenset[str] | set[str] = frozenset()
    ) -> set[str]:
        """The workers not known to have ended, after adding ``started`` and dropping
        ``ended``; written down when that changes."""
        path = self.state_dir / "workers" if self.state_dir is not None else None
        if self._kept is None:
            self._kept = set()
            if path is not None:
                with contextlib.suppress(OSError):
                    self._kept = set(path.read_text().split())
        changed = (started - self._kept) | (ended & self._kept)
        self._kept = (self._kept | started) - ended
        if changed and path is not None:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            path.write_text("".join(f"{job}\n" for job in sorted(self._kept)))
        return set(self._kept)

    async def _run(
        self, host: str, argv: list[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        return await run_remote(self.shell_of(host), argv, stdin, once=once)
