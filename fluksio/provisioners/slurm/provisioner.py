"""The Slurm provisioner: ``sbatch``, ``squeue``, ``scancel``, ``sinfo`` and ``sacctmgr``
over SSH."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from fluksio.provisioners.base import ProvisionError, SiteLimit
from fluksio.provisioners.batch import BatchProvisioner, QueuedJob
from fluksio.provisioners.slurm.limits import (
    ACCOUNTING_SCRIPT,
    Accounting,
    accounting_lines,
    parse_accounting,
    profile_limit,
)
from fluksio.provisioners.slurm.options import (
    missing_partitions,
    parse_slurm_time,
    past_time_limits,
)
from fluksio.provisioners.slurm.script import (
    SQUEUE_FORMAT,
    parse_sbatch_parsable,
    parse_squeue,
    render_script,
)
from fluksio.provisioners.slurm.settings import SlurmProfile, SlurmSettings

__all__ = ["SlurmProvisioner"]


class SlurmProvisioner(BatchProvisioner[SlurmSettings, SlurmProfile]):
    """Submits to a Slurm cluster through a remote shell on its login node."""

    type_name = "slurm"
    settings_model = SlurmSettings
    job_noun = "Slurm job"

    submit_command = "sbatch --parsable"
    # Every state, so a job that ended since the last poll is seen ending, not lost.
    queue_command = ("squeue", "--me", "-h", "-t", "all", "-o", SQUEUE_FORMAT)
    cancel_command = "scancel --"
    hold_option = "--hold"
    # Each partition: its name (the default marked *), state, nodes, their state, time limit.
    site_command = ("sinfo", "-h", "-o", "%P %a %D %t %l")

    def job_script(self, profile: SlurmProfile, *, request_id: str, connect_to: str | None) -> str:
        return render_script(self.settings, profile, request_id=request_id, connect_to=connect_to)

    def parse_job_id(self, stdout: str) -> str:
        return parse_sbatch_parsable(stdout)

    def parse_queue(self, stdout: str) -> Mapping[str, QueuedJob]:
        return parse_squeue(stdout)

    def read_site(self, stdout: str) -> list[str]:
        refused = self._partition_refusals(stdout)
        if refused:
            raise ProvisionError("; ".join(refused.values()))
        return ["sinfo:", stdout.rstrip("\n")]

    async def check(self) -> str:
        said = await super().check()
        accounting = await self._accounting()
        limits = self._limits(accounting)
        refused = [limit.refused for limit in limits.values() if limit.refused]
        if refused:
            raise ProvisionError("; ".join(refused))
        return said + "\n".join(accounting_lines(accounting, limits)) + "\n"

    async def site_limits(self) -> Mapping[str, SiteLimit]:
        # The partitions' refusals too: a profile past its partition's time limit is
        # never asked for, where before each submission was refused until it paused.
        limits = self._limits(await self._accounting())
        done = await self.run(self._argv(self.site_command))
        if not done.ok:
            raise ProvisionError(f"sinfo: {done.error_text()}")
        partitions = self._partition_refusals(done.stdout)
        return {
            name: replace(limit, refused=limit.refused or partitions.get(name))
            for name, limit in limits.items()
        }

    def _limits(self, accounting: Accounting) -> dict[str, SiteLimit]:
        return {p.name: profile_limit(accounting, p) for p in self.settings.profiles}

    def _partition_refusals(self, sinfo: str) -> dict[str, str]:
        """Each profile that names a partition ``sinfo`` does not list, or asks for more
        time than its partitions allow: why, in one sentence."""
        rows = [line.split() for line in sinfo.splitlines() if line.strip()]
        partitions = [row[0] for row in rows]
        limits = {row[0].rstrip("*"): _time_limit(row[-1]) for row in rows if len(row) >= 5}
        default = next((p.rstrip("*") for p in partitions if p.endswith("*")), None)
        refused = {}
        for profile in self.settings.profiles:
            said = [
                *missing_partitions([profile], partitions),
                *past_time_limits([profile], limits, default),
            ]
            if said:
                refused[profile.name] = "; ".join(said)
        return refused

    async def _accounting(self) -> Accounting:
        argv = ["sh", "-c", self.program(ACCOUNTING_SCRIPT), "fluksio-sacctmgr"]
        done = await self.run(argv)
        if not done.ok:
            raise ProvisionError(f"sacctmgr: {done.error_text()}")
        try:
            return parse_accounting(done.stdout)
        except ValueError as exc:
            raise ProvisionError(str(exc)) from None

    def refusal(self, said: str) -> str:
        return said.replace("sbatch: error: ", "")

    def walltime_s(self, profile: SlurmProfile) -> float | None:
        return profile.time_limit_s


def _time_limit(text: str) -> float | None:
    """A partition's time limit as ``sinfo`` writes it; None for none, or one it could
    not read (``n/a``): nothing is refused on a guess."""
    try:
        return parse_slurm_time(text)
    except ValueError:
        return None
