"""Reading a site's limits from the local Slurm's accounting (``make slurm-up``): what the
engine's reading costs, against its floors in the same run on the same kept-open SSH
connection.

* ours: ``SlurmProvisioner.site_limits()``: the user's associations with the default
  account, and the QOS table (two ``sacctmgr`` calls in one SSH command), then the
  partitions (``sinfo``), read for each profile;
* floors: ``true`` over the connection, and one bare ``sacctmgr -nP show qos``.

The engine reads it at a provisioner's first need and every five minutes after.

Run as root after ``make slurm-up``: ``.venv/bin/python bench/site_limits.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from provisioning import _facts, _settings, median_ms, print_table

from fluksio.provisioners.slurm import SlurmProvisioner, SlurmSettings
from fluksio.ssh import AsyncsshTransport


async def _measure(repeat: int) -> dict[str, float]:
    facts = _facts()
    provisioner = SlurmProvisioner(SlurmSettings.model_validate(_settings(facts, 1, [])))
    settings = provisioner.settings
    transport = AsyncsshTransport(
        settings.login, settings.ssh_key, known_hosts=settings.known_hosts
    )
    await transport.run(["true"])  # both connections open before anything is timed
    await provisioner.site_limits()
    qos = ["sacctmgr", "-nP", "show", "qos", "format=Name,MaxWall,MaxJobsPU,MaxSubmitPU"]
    results = {
        "floor: true over the open SSH connection": await median_ms(
            repeat, lambda: transport.run(["true"])
        ),
        "floor: one bare sacctmgr show qos": await median_ms(repeat, lambda: transport.run(qos)),
        "ours: site_limits() (two sacctmgr and sinfo, two SSH commands)": await median_ms(
            repeat, provisioner.site_limits
        ),
    }
    await transport.close()
    await provisioner.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print_table(asyncio.run(_measure(args.repeat)), "median ms")


if __name__ == "__main__":
    main()
