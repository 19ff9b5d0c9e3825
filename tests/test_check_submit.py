"""``fluksio provisioners check --submit`` on the real local Slurm and Grid Engine: each
profile's held test job is taken and withdrawn at once, and a site refusal (a partition or
a queue the site does not have) shows now, in the site's words, with exit code 2."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.engine import attach_url_on, free_port, write_provisioners
from tests.support.slurm import local_gridengine, local_slurm, slurm_provisioner
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]


def _check_submit(data_dir: Path) -> Any:
    return fluksio("provisioners", "check", "--submit", "--data-dir", str(data_dir), timeout=120)


def test_a_slurm_profile_is_tried_with_a_held_job_and_a_wrong_partition_is_refused(
    tmp_path: Path,
) -> None:
    slurm = local_slurm()
    entry = slurm_provisioner(slurm, free_port())
    good = entry["profiles"][0]
    bad = {**good, "name": "nowhere", "sbatch": ["--partition=no-such"]}
    write_provisioners(tmp_path / "data", [{**entry, "profiles": [good, bad]}])
    checked = _check_submit(tmp_path / "data")
    assert checked.returncode == 2, checked
    taken = re.search(r"^hpc/small: Slurm job (\d+) was taken, held and withdrawn$",
                      checked.stdout, re.M)  # fmt: skip
    assert taken is not None, checked.stdout
    assert re.search(
        r"^hpc/nowhere: sbatch refused the job: .*partition", checked.stdout, re.M | re.I
    )
    assert checked.stderr.strip() == (
        "Error: the site refused a test job of hpc/nowhere (said above)"
    ), checked.stderr
    job_id = taken.group(1)
    wait_for(
        lambda: slurm.job_state(job_id) in ("CANCELLED", ""),
        timeout=30,
        what=f"the held test job {job_id} to be withdrawn",
    )


def test_a_grid_engine_profile_gets_the_same_from_the_batch_template(tmp_path: Path) -> None:
    cell = local_gridengine()
    login = cell.login
    good = {"name": "one", "labels": ["sge"], "queue": cell.queue}
    entry = {
        "type": "gridengine", "name": "sge", "login": login.login_with_port,
        "engine_url": attach_url_on(free_port()), "ssh_key": login.key,
        "known_hosts": login.known_hosts, "worker_command": login.worker,
        "profiles": [good, {**good, "name": "nowhere", "queue": "nosuch.q"}],
    }  # fmt: skip
    write_provisioners(tmp_path / "data", [entry])
    checked = _check_submit(tmp_path / "data")
    assert checked.returncode == 2, checked
    taken = re.search(r"^sge/one: Grid Engine job (\d+) was taken, held and withdrawn$",
                      checked.stdout, re.M)  # fmt: skip
    assert taken is not None, checked.stdout
    assert re.search(r"^sge/nowhere: qsub refused the job: .*nosuch\.q", checked.stdout, re.M)
    job_id = taken.group(1)
    wait_for(
        lambda: job_id not in cell.qstat_jobs(),
        timeout=30,
        what=f"the held test job {job_id} to be withdrawn",
    )
