"""``provisioners.json`` for machines you own: the shared SSH options, and the hosts."""

from __future__ import annotations

from pydantic import Field, field_validator

from fluksio.provisioners.base import ProfileSettings, ProvisionerSettings
from fluksio.provisioners.ssh_access import LOGIN_PATTERN, SSHAccess, no_control

__all__ = ["HostProfile", "HostsSettings"]


class HostProfile(ProfileSettings):
    """One machine: a profile of at most one worker, reached at its own ``login``."""

    login: str = Field(pattern=LOGIN_PATTERN)
    """``user@host[:port]`` of the machine, or a ``Host`` alias of ``ssh_config``."""
    ssh_key: str | None = Field(default=None, min_length=1)
    """This host's key, instead of the provisioner's ``ssh_key``."""
    prerun: list[str] = Field(default_factory=list)
    """Shell lines run before the worker starts (``source ~/venvs/fluksio/bin/activate``)."""

    @field_validator("max_workers")
    @classmethod
    def _one_worker(cls, value: int) -> int:
        if value != 1:
            raise ValueError("a host runs one worker: max_workers must be 1 (or left out)")
        return value

    @field_validator("prerun")
    @classmethod
    def _prerun_lines(cls, values: list[str]) -> list[str]:
        return no_control(values, "prerun lines")


class HostsSettings(SSHAccess, ProvisionerSettings[HostProfile]):
    profiles: list[HostProfile] = Field(min_length=1, validation_alias="hosts")
    """The machines, each a profile of its own (``"hosts"`` in the file)."""

    @field_validator("login_address")
    @classmethod
    def _no_login_node(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                'an SSH host has no login node: with "route": "login" its worker dials the'
                " host's own loopback, so login_address is not used"
            )
        return value
