"""What every provisioner is: the class a provisioner subclasses, and what the engine
gives it when it starts it.

A provisioner asks some outside system (a batch scheduler, a cloud) for a machine whose
payload is an ordinary worker dialling back to the engine. A subclass of
:class:`Provisioner` implements :meth:`~Provisioner.render` (pure: what would be
submitted) and the asynchronous life cycle :meth:`~Provisioner.submit`,
:meth:`~Provisioner.poll` and :meth:`~Provisioner.cancel`; the engine's provisioning
driver awaits those methods directly. Hooks (:mod:`fluksio.provisioners.hookspecs`) are
for what extends the engine: registering provisioner types, and hearing of workers. (Apart
from :mod:`~fluksio.provisioners.base`, the plain data, because it holds the engine's
clock: the pure provisioning machine reads no clock.)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from fluksio.clock import Clock, SystemClock
from fluksio.provisioners.base import (
    JobStatus,
    ProfileT,
    ProvisionerSettings,
    SiteLimit,
    Submission,
)

__all__ = ["EngineLink", "Provisioner"]


@dataclass(frozen=True)
class EngineLink:
    """What the engine's provisioning gives a provisioner when it starts it: where the
    engine listens, and what the provisioner reports to. Given once, by
    :meth:`Provisioner.start`; never hung on it afterwards."""

    address: tuple[str, int] | None
    """Where the engine listens, as its own machine reaches it (``127.0.0.1`` for a
    wildcard address); None where the engine serves no socket (an engine embedded in a
    test). What a provisioner that carries its workers' connections forwards to."""
    command_ran: Callable[[str, float, bool], None]
    """Time a command run remotely (``program, seconds, reached``): it becomes an event of
    the engine's stream and the ``fluksio_ssh_command_duration_seconds`` metric."""
    path_changed: Callable[[], None]
    """Call when :meth:`Provisioner.path_down` changes: the waiting calls' reasons and the
    Workers screen show it."""


SettingsT = TypeVar("SettingsT", bound=ProvisionerSettings[Any])


class Provisioner(ABC, Generic[SettingsT, ProfileT]):
    """Base of every provisioner type; one instance per configured provisioner.

    A subclass names its settings and profile types as parameters
    (``Provisioner[SlurmSettings, SlurmProfile]``), sets :attr:`type_name` and
    :attr:`settings_model`, and implements the abstract methods. The engine's provisioning
    driver awaits them directly; a plugin writes no hook for the life cycle.
    """

    type_name: ClassVar[str]
    """The ``"type"`` in ``provisioners.json``."""
    settings_model: ClassVar[type[ProvisionerSettings[Any]]]
    """The pydantic model each configured entry of this type is validated with."""
    job_noun: ClassVar[str] = "job"
    """How its requests are called in sentences: ``"Slurm job"`` gives "Slurm job 12"."""
    link: EngineLink | None = None
    """What the engine's provisioning gave at :meth:`start`; None in a provisioner it never
    started (``fluksio provisioners check``, a dry run, a test of one call)."""

    def __init__(
        self, settings: SettingsT, *, clock: Clock | None = None, state_dir: Path | None = None
    ) -> None:
        """``clock`` and ``state_dir`` are what the engine gives every provisioner it
        makes; a subclass's constructor takes them as keywords and passes them on
        (``**given`` does)."""
        self.settings = settings
        self.clock: Clock = clock if clock is not None else SystemClock()
        """The engine's clock: every wait and timer of the provisioner reads it (tests
        give one they advance); the system's where no engine made it."""
        self.state_dir = state_dir
        """A directory of its own under the engine's data directory, for what it keeps
        between calls (the Slurm provisioner's shared SSH connection), given by the engine
        and the CLI; None where nothing is kept (a dry run, a test). Create it 0700 on
        first use, not in the constructor."""

    def start(self, link: EngineLink) -> None:
        """Called once by the engine's provisioning, before it asks anything else: where
        the engine listens, and what to report to. A subclass that extends it calls
        ``super().start(link)`` first."""
        self.link = link

    @property
    def engine_address(self) -> tuple[str, int] | None:
        """Where the engine listens (:attr:`EngineLink.address`); None until started."""
        return self.link.address if self.link is not None else None

    def command_ran(self, program: str, seconds: float, reached: bool) -> None:
        """Tell the engine a remote command ran (what a shell is given as its
        ``on_command`` when it is opened); nothing unless started."""
        if self.link is not None:
            self.link.command_ran(program, seconds, reached)

    def path_changed(self) -> None:
        """Tell the engine :meth:`path_down` changed; nothing unless started."""
        if self.link is not None:
            self.link.path_changed()

    @property
    def name(self) -> str:
        return self.settings.name

    def walltime_s(self, profile: ProfileT) -> float | None:
        """How long a job of ``profile`` may run; None: no limit. Its ``walltime_s`` by
        default; a subclass may read it from the profile's own options."""
        return profile.walltime_s

    def starting(self, profile: ProfileT) -> str:
        """How a request of ``profile`` under way is said on the calls waiting for it, until
        the outside system names a state: ``"submitting a Slurm job"`` by default (from
        :attr:`job_noun`); the SSH hosts provisioner says ``"starting a worker on
        gpu-box-2"``."""
        return f"submitting a {self.job_noun}"

    def reach(self) -> str:
        """How its workers reach the engine, as ``provisioners check`` says it."""
        return f"directly, at {self.settings.engine_url}"

    def path_down(self) -> str | None:
        """Why this provisioner's workers cannot reach the engine now, in one sentence
        (shown on waiting calls and the Workers screen); None when they can, or when it
        does not carry their connections (the default)."""
        return None

    def profile(self, name: str) -> ProfileT:
        profiles: list[ProfileT] = self.settings.profiles
        for profile in profiles:
            if profile.name == name:
                return profile
        known = ", ".join(p.name for p in profiles)
        raise KeyError(f"provisioner {self.settings.name!r} has no profile {name!r} ({known})")

    # -- what a subclass implements ----------------------------------------------------

    @abstractmethod
    def render(self, profile: ProfileT, *, request_id: str) -> str:
        """What would be submitted for ``profile``: pure, no I/O (a dry run).

        ``fluksio provisioners check --script`` prints it. ``request_id`` is the engine's
        id of the request: mark the job with it, so :meth:`find` can find a job whose id
        the engine never learned. The worker token is never part of the text.
        """

    @abstractmethod
    async def submit(self, profile: ProfileT, *, request_id: str, token: str) -> Submission:
        """Ask for one machine of ``profile`` whose worker uses ``token``.

        Called when a queued node needs capacity nothing attached could ever give and no
        request for ``profile`` is outstanding. ``token`` is minted for this request alone
        (24 h, the profile's labels): deliver it without putting it in argv, a job's
        environment listing or logs. Raise :class:`ProvisionError` with the outside
        system's own words when it refuses; the engine records them as the profile's last
        error and retries with capped backoff.
        """

    @abstractmethod
    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        """The state of each request, in one round trip where possible.

        Called once per ``poll_interval_s`` with every live request of this provisioner. A
        job missing from the answer has left the system: the engine treats it as ended.
        """

    @abstractmethod
    async def cancel(self, job_id: str | None, *, request_id: str) -> None:
        """Withdraw one request, stop its machine if it runs, and clean up after it.

        Called for every request that ends without its worker attaching: it outlived
        ``provision_timeout_s``, its job ended first, the engine stops, or (``job_id``
        None) a submission whose answer was lost left no job :meth:`find` could see.
        Remove what the submission left for the job (a token file). ``request_id`` is
        durable: a restarted engine passes it for requests an earlier run made. Cancelling
        a job that already ended must succeed quietly.
        """

    async def find(self, request_ids: Iterable[str]) -> Mapping[str, str]:
        """Jobs submitted for these requests whose ids the engine never learned.

        Called at a poll for submissions that were sent and whose answer was lost (a
        timeout, a dropped connection, an engine killed mid-submission). Return request id
        -> job id for every one the outside system holds (a job marked by :meth:`render`);
        the engine adopts each as if the submission had answered, and counts the others
        as never submitted. Raise :class:`ProvisionError` when the system cannot be asked.

        The default finds nothing: a provisioner that cannot mark its jobs.
        """
        return {}

    async def check(self) -> str:
        """Prove access to the outside system; return what it said (``sinfo``).

        Called by ``fluksio provisioners check --ssh``; optional.
        """
        return "nothing to check"

    async def try_submission(self, profile: ProfileT) -> str | None:
        """Submit a job of ``profile`` that cannot start (held), then withdraw it.

        Called by ``fluksio provisioners check --submit``, so that what the site refuses (a
        partition, an account, a QOS, a time limit) shows before the first real need.
        Return what happened in one sentence (``Slurm job 57 was taken, held, and
        withdrawn``); raise :class:`ProvisionError` with the site's own words when it
        refuses. No token is minted: a held job never runs.

        The default submits nothing (None): a provisioner with nothing to hold, such as
        machines one owns. :class:`~fluksio.provisioners.batch.BatchProvisioner` gives
        every backend on the batch template one.
        """
        return None

    async def site_limits(self) -> Mapping[str, SiteLimit]:
        """What the site's own accounting allows each profile's jobs: profile name ->
        :class:`~fluksio.provisioners.base.SiteLimit` (the Slurm provisioner reads
        ``sacctmgr``'s association and QOS limits).

        Called from a profile's first need on, every five minutes: the profile never has
        more jobs alive than ``most_jobs``, a call waiting on that limit says so, and a
        profile the site ``refused`` is not asked for while it stands. Raise
        :class:`ProvisionError` when the site cannot be asked (the last answer stands).

        The default reads nothing: no limits beyond each profile's ``max_workers``.
        """
        return {}

    async def close(self) -> None:
        """Release what the provisioner holds open (connections); called at shutdown."""
