"""What the provisioning machine asks of its driver: effects, carried out in the order
given (:mod:`fluksio.provisioners.driver` says how each is)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.machine.requests import MachineRequest

__all__ = [
    "AskBackend",
    "Cancel",
    "Changed",
    "CleanUp",
    "Effect",
    "Forget",
    "Log",
    "Observe",
    "ReadSite",
    "Remember",
    "RememberPause",
    "RememberSite",
    "Revoke",
    "StartPoll",
    "Submit",
    "Unwake",
    "Wake",
    "WriteDown",
]


@dataclass(frozen=True)
class Submit:
    """Mint the request's token, write the request down, submit it; answer with
    :meth:`~ProvisioningMachine.submitted` or :meth:`~ProvisioningMachine.submit_failed`.
    With ``check_login``, first ask whether a login is still needed
    (:meth:`~ProvisioningMachine.login_still_needed`)."""

    profile: str
    request_id: str
    check_login: bool


@dataclass(frozen=True)
class Cancel:
    """Cancel the request's job (after a last look for it when ``look_first``); answer with
    :meth:`~ProvisioningMachine.cancelled`."""

    profile: str
    request_id: str
    job_id: str | None
    look_first: bool
    message: str
    failed: bool


@dataclass(frozen=True)
class CleanUp:
    """Remove what a request left (its job, a token file); nothing is answered."""

    provisioner: str
    request_id: str
    job_id: str | None


@dataclass(frozen=True)
class StartPoll:
    """Poll the provisioner: look for its lost submissions, then read its jobs' states;
    answer with :meth:`~ProvisioningMachine.found`, :meth:`~ProvisioningMachine.polled` and
    at last :meth:`~ProvisioningMachine.poll_ended`."""

    provisioner: str


@dataclass(frozen=True)
class ReadSite:
    """Read what the provisioner's site allows (:meth:`~fluksio.provisioners.provisioner.
    Provisioner.site_limits`), now and every few minutes after; answer with
    :meth:`~ProvisioningMachine.site_read`, or :meth:`~ProvisioningMachine.site_unread`
    when it cannot be read."""

    provisioner: str


@dataclass(frozen=True)
class Remember:
    request: MachineRequest


@dataclass(frozen=True)
class Forget:
    request_id: str


@dataclass(frozen=True)
class RememberPause:
    """Write down that a person paused the profile (``said``: the sentence), or (None)
    that it is no longer paused: a pause by hand outlasts the engine."""

    profile: str
    said: str | None


@dataclass(frozen=True)
class RememberSite:
    """Write down what the site allows the profile, as last read: a restarted engine keeps
    to it even when the site cannot be read then."""

    profile: str
    limit: SiteLimit


@dataclass(frozen=True)
class Revoke:
    jti: str
    reason: str


@dataclass(frozen=True)
class Wake:
    """Call :meth:`~ProvisioningMachine.woke` with ``key`` at ``at`` (replacing a wake of
    the same key)."""

    key: str
    at: float


@dataclass(frozen=True)
class Unwake:
    key: str


@dataclass(frozen=True)
class Observe:
    what: Literal["submitted", "failed", "attached"]
    provisioner: str
    profile: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Log:
    level: Literal["info", "warning"]
    event: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class Changed:
    """How a profile stands changed."""


# Three kinds, so that the driver carries each out in a place of its own: what is asked
# of a backend (each a task of its own), what the engine writes down, and what the engine
# and its readers are told.
AskBackend = Submit | Cancel | CleanUp | StartPoll | ReadSite
WriteDown = Remember | RememberPause | RememberSite | Forget | Revoke
Effect = AskBackend | WriteDown | Wake | Unwake | Observe | Log | Changed
