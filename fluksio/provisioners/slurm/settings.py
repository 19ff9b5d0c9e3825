"""``provisioners.json`` for Slurm: the provisioner's SSH and engine options, its profiles."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fluksio.provisioners.base import ProfileSettings, ProvisionerSettings
from fluksio.provisioners.slurm.options import parse_slurm_time, sbatch_time_limit
from fluksio.ssh.shell import Transport

__all__ = ["SlurmProfile", "SlurmSettings", "no_control"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def no_control(values: list[str], what: str) -> list[str]:
    for value in values:
        if _CONTROL.search(value):
            raise ValueError(f"{what} must not contain control characters (newlines, tabs)")
    return values


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


class SlurmSettings(ProvisionerSettings[SlurmProfile]):
    login: str = Field(pattern=r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9._-]+(:[0-9]{1,5})?$")
    """``user@host[:port]`` of the login node, or a ``Host`` alias of ``ssh_config``."""
    ssh_key: str | None = Field(default=None, min_length=1)
    """The private key to log in with (default: the config's ``IdentityFile``, the
    ssh-agent's keys, and the user's default keys)."""
    known_hosts: str | None = None
    """Host keys to check against (default: the config's ``UserKnownHostsFile``, else
    ``~/.ssh/known_hosts``)."""
    ssh_config: str | None = None
    """The OpenSSH client config to read (default: ``~/.ssh/config`` if it exists)."""
    trust_on_first_use: bool = False
    """Accept and remember an unknown host key once; off by default."""
    transport: Transport = "asyncssh"
    """How SSH is spoken: ``asyncssh`` (in the engine, the default) or ``openssh`` (the
    system ``ssh``: everything the user's OpenSSH does, one shared connection, and
    ``fluksio provisioners login`` for sites that ask for a one-time code)."""
    worker_command: str = "fluksio-worker"
    ca_file: str | None = Field(default=None, min_length=1)
    """PEM certificates of a private CA the workers must trust for ``engine_url``. Read at
    each submission and written beside the token on the login node; the job script only
    names that file."""

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

    @field_validator("ca_file")
    @classmethod
    def _readable_pem(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                text = Path(value).expanduser().read_text(errors="replace")
            except OSError as exc:
                raise ValueError(f"{value} cannot be read ({exc.strerror})") from None
            if "-----BEGIN CERTIFICATE-----" not in text:
                raise ValueError(f"{value} holds no PEM certificate")
        return value

    @field_validator("engine_url", "worker_command")
    @classmethod
    def _single_line(cls, value: str) -> str:
        no_control([value], "this field")
        return value
