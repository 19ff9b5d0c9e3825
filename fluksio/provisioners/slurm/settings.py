"""``provisioners.json`` for Slurm: the provisioner's SSH and engine options, its profiles."""

from __future__ import annotations

from pydantic import Field, field_validator

from fluksio.provisioners.batch import BatchProfile, BatchSettings, batch_options
from fluksio.provisioners.slurm.options import parse_slurm_time, sbatch_time_limit
from fluksio.provisioners.ssh_access import no_control

__all__ = ["SlurmProfile", "SlurmSettings", "no_control"]


class SlurmProfile(BatchProfile):
    sbatch: list[str] = Field(default_factory=list)
    """Extra ``sbatch`` options, one per entry: ``--partition=gpu``."""

    @field_validator("sbatch")
    @classmethod
    def _sbatch_options(cls, values: list[str]) -> list[str]:
        return batch_options(values, "an sbatch option")

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


class SlurmSettings(BatchSettings[SlurmProfile]):
    """A Slurm cluster: ``login`` is its login node; the SSH options, the login route and
    the engine's are :class:`~fluksio.provisioners.batch.BatchSettings`'."""
