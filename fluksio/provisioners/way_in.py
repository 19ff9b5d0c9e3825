"""``"route": "login"`` as a provisioner holds it: what its workers dial, kept up while any
of them may run.

:class:`~fluksio.provisioners.login_route.LoginRoute` keeps the path itself (a forward
over the provisioner's SSH connection and a relay at its far end). :class:`WayIn` is the
part a provisioner owns: it builds the path when a submission needs its address, keeps it
while any job may still run, takes it down after the last, and says how it stands
(:meth:`~WayIn.reach`, :meth:`~WayIn.path_down`, :meth:`~WayIn.check`). The batch base
(:class:`~fluksio.provisioners.batch.BatchProvisioner`) holds one for its login node, so
every batch backend offers the route without a line of its own; the SSH hosts provisioner
holds one per host (``on_own_host``: the worker dials the forwarded port on the host's
own loopback, so a box that can send nothing out still serves calls).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from fluksio.provisioners.base import ProvisionError
from fluksio.provisioners.login_route import RELAY_MARK, LoginRoute, RouteDown
from fluksio.provisioners.provisioner import Provisioner
from fluksio.provisioners.ssh_access import SSHAccess, run_remote
from fluksio.ssh import parse_login
from fluksio.ssh.shell import Forwarding, RemoteShell, TransportError

__all__ = ["ROUTE_WAIT_S", "WayIn"]

ROUTE_WAIT_S = 30.0
"""How long a submission waits for the login route to come up before it fails (and the
profile rests, as after any failed submission)."""
# The far end's python3 and this provisioner's relays (``ps``: pid, seconds, argv).
_ROUTE_CHECK = (
    "python3 -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo;"
    ' ps -u "$(id -u)" -o pid=,etimes=,args= | grep -F -- " fluksio-relay $1 " | grep -v grep;'
    " exit 0"
)
_LOOPBACK = "127.0.0.1"


class WayIn:
    """The login route of one SSH connection of ``provisioner`` (whose settings are
    :class:`~fluksio.provisioners.SSHAccess`), to ``login``.

    ``shell`` gives the connection (opened lazily by the provisioner). With ``on_own_host``
    the relay listens on the far end's loopback only and the workers there dial it; else
    it listens where compute nodes reach it, at ``login_address`` (default: the host SSH
    connects to). ``port_file`` names the file under the provisioner's ``state_dir`` that
    keeps the relay's port across restarts, so running workers find it where they were
    told.
    """

    def __init__(
        self,
        provisioner: Provisioner[Any, Any],
        shell: Callable[[], RemoteShell],
        *,
        login: str,
        on_own_host: bool = False,
        port_file: str = "route-port",
    ) -> None:
        self._provisioner = provisioner
        self._shell = shell
        self._login = login
        self._on_own_host = on_own_host
        self._port_file = port_file
        self._route: LoginRoute | None = None
        self._submitting = 0

    @property
    def wanted(self) -> bool:
        """Whether the provisioner's settings ask for the route at all."""
        return self._access.route == "login"

    @property
    def _access(self) -> SSHAccess:
        settings: SSHAccess = self._provisioner.settings
        return settings

    def _host(self, destination: str | None = None) -> str:
        return self._access.login_address or parse_login(destination or self._login)[1]

    def planned(self) -> str | None:
        """Where workers would dial now (``HOST:PORT``, ``PORT`` while no port is chosen), for
        a dry run; None without the route."""
        if not self.wanted:
            return None
        address = self._route.address if self._route is not None else None
        host = _LOOPBACK if self._on_own_host else self._host()
        return f"{host}:{address[1] if address else 'PORT'}"

    @contextlib.contextmanager
    def submitting(self) -> Iterator[None]:
        """Around a submission: the route is not taken down meanwhile by a poll that found
        no job alive."""
        self._submitting += 1
        try:
            yield
        finally:
            self._submitting -= 1

    async def connect_to(self) -> str | None:
        """Where a new job's worker dials (``HOST:PORT``), the route built first and waited
        for up to :data:`ROUTE_WAIT_S`; None without the route. Raises
        :class:`ProvisionError` in the route's own sentence when it does not come up."""
        if not self.wanted:
            return None
        try:
            host, port = await (await self._login_route()).ready(ROUTE_WAIT_S)
        except RouteDown as down:
            raise ProvisionError(down.sentence, login_needed=down.login_needed) from None
        return f"{_LOOPBACK if self._on_own_host else host}:{port}"

    async def keep(self, jobs_alive: bool) -> None:
        """After a poll: keep the route while any job may still run; take it down after
        the last, unless a submission is under way."""
        if not self.wanted:
            return
        if jobs_alive:
            (await self._login_route()).keep()
        elif self._route is not None and not self._submitting:
            await self._route.stop()

    def reach(self) -> str | None:
        """How workers reach the engine, as ``provisioners check`` says it; None without
        the route."""
        if not self.wanted:
            return None
        url = self._provisioner.settings.engine_url
        if self._on_own_host:
            return f"through its own SSH connection, on its loopback, verifying {url}"
        host = self._access.login_address or f"{self._host()} (as SSH resolves it)"
        return f"through the login node, at {host}, verifying {url}"

    def path_down(self) -> str | None:
        """Why the route is down, in one sentence; None while it is up or not wanted."""
        return self._route.down_sentence() if self._route is not None else None

    async def check(self, destination: str) -> list[str]:
        """The route as the far end shows it (its Python, a relay running), for
        ``provisioners check --ssh``; no lines without the route."""
        if not self.wanted:
            return []
        argv = ["sh", "-c", _ROUTE_CHECK, "fluksio-route-check", self._provisioner.name]
        facts = (await run_remote(self._shell(), argv)).stdout.splitlines()
        python = facts[0] if facts else ""
        if not python.startswith("3.") or tuple(map(int, python.split(".")[:2])) < (3, 6):
            raise ProvisionError(
                f'"route": "login" runs a relay with the {self._far_end}\'s python3, which'
                f" must be 3.6 or newer; it has {python or 'none'}"
            )
        state_dir = self._provisioner.state_dir
        port_file = state_dir / self._port_file if state_dir is not None else None
        port = port_file.read_text().strip() if port_file and port_file.exists() else None
        port = port or "(a port chosen when a job first needs it)"
        if self._on_own_host:
            lines = [f"route: login; its worker connects to {_LOOPBACK}:{port} there"]
        else:
            lines = [f"route: login; jobs' workers connect to {self._host(destination)}:{port}"]
        lines.append(f"relay python3: {python}")
        relays = [line.split() for line in facts[1:] if RELAY_MARK in line.split()]
        lines += [f"relay: running (pid {fields[0]}, for {fields[1]} s)" for fields in relays]
        if not relays:
            lines.append("relay: none running (the engine starts one while it has jobs)")
        return lines

    async def stop(self) -> None:
        """Take the route down (at the provisioner's close)."""
        if self._route is not None:
            await self._route.stop()

    @property
    def _far_end(self) -> str:
        return "host" if self._on_own_host else "login node"

    def _path_changed(self) -> None:
        self._provisioner.path_changed()

    async def _login_route(self) -> LoginRoute:
        if self._route is None:
            shell = self._shell()
            if not isinstance(shell, Forwarding):
                raise ProvisionError('"route": "login" needs an SSH transport that forwards')
            host = self._access.login_address
            if host is None:
                try:
                    destination = (await shell.describe()).destination
                except TransportError as exc:
                    raise ProvisionError(exc.detail) from None
                host = parse_login(destination)[1]
            state_dir = self._provisioner.state_dir
            self._route = LoginRoute(
                shell,
                label=self._provisioner.name,
                login_host=host,
                engine=lambda: self._provisioner.engine_address,
                clock=self._provisioner.clock,
                port_file=state_dir / self._port_file if state_dir is not None else None,
                on_change=self._path_changed,
                listen_on=_LOOPBACK if self._on_own_host else None,
            )
        return self._route
