"""``provisioners.json`` for Slurm: the provisioner's SSH and engine options, its profiles."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from fluksio.provisioners.base import ProfileSettings, ProvisionerSettings
from fluksio.provisioners.slurm.options import parse_slurm_time, sbatch_time_limit
from fluksio.provisioners.ssh_access import LOGIN_PATTERN, SSHAccess, no_control

__all__ = ["SlurmProfile", "SlurmSettings", "no_control"]


class SlurmProfile(ProfileSettings):
    sbatch: list[str] = Field(default_factory=list)
    """Extra ``sbatch`` options, one per entry: ``--partition=gpu``."""
    prerun: list[str] = Field(default_factory=list)
    """Shell lines run before the worker starts (they own the environment)."""

    @field_validator("sbatch")
    @classmethod
    def _sbatch_options(cls, values: list[str]) -> list[str]:
        for value in no_control(values, "sbatch options"):
            if not value.startswith("-"):
                raise ValueError(f"{value!r} is not an sbatch option (it starts with -)")
        return values

    @field_validator("prerun")
    @classmethod
    def _prerun_lines(cls, values: list[str]) -> list[str]:
        return no_control(values, "prerun lines")

    @field_validator("sbatch")
    @classmethod
    def _time_limit(cls, values: list[str]) -> list[str]:
        limit = sbatch_time_limit(values)
        if limit is not None:
            parse_slurm_time(limit)  # a ValueError names the bad limit
        return values

    @property
    def time_limit_s(self) -> float | None:
        """How long its jobs may run: ``walltime_s`` if set, else the ``--time`` of its
        ``sbatch`` options; None: no limit the profile states."""
        if self.walltime_s is not None:
            return self.walltime_s
        limit = sbatch_time_limit(self.sbatch)
        return parse_slurm_time(limit) if limit is not None else None


class SlurmSettings(SSHAccess, ProvisionerSettings[SlurmProfile]):
    login: str = Field(pattern=LOGIN_PATTERN)
    """``user@host[:port]`` of the login node, or a ``Host`` alias of ``ssh_config``."""
    route: Literal["direct", "login"] = "direct"
    """How jobs' workers reach the engine: ``direct`` (they open a connection to
    ``engine_url`` themselves) or ``login`` (through the login node, over this
    provisioner's SSH connection, for compute nodes with no route out)."""
    login_address: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$", max_length=253
    )
    """With ``route: login``: the login node's name or address as compute nodes reach it
    (default: the host SSH connects to); an IPv6 address in brackets."""

    @model_validator(mode="after")
    def _login_address_needs_the_login_route(self) -> SlurmSettings:
        if self.login_address is not None and self.route != "login":
            raise ValueError('login_address is used only with "route": "login"')
        return self
