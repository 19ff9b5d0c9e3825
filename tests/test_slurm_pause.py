"""On the local Slurm: a profile whose generic resource the site does not have (what only
``sbatch`` can refuse: a missing partition is refused before any submission) pauses itself after
its failed submissions in a row, says so where a user looks (the call's reason, ``fluksio
provisioners status``), and asks the site again once a person runs ``fluksio provisioners
resume``."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.runs import put_flow, start_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import NODE, no_job_outlives_its_test, profile_view, slurm, start
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name


def test_a_resource_the_site_lacks_pauses_the_profile_and_resume_asks_again(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    engine, token = start(
        retry_base_s=0.2,
        retry_max_s=0.5,
        pause_after_failed_submissions=2,
        profile={"sbatch": ["--gres=nope:1"]},
    )
    assert put_flow(engine, token, "f", [{"id": "n", "worker": "hpc", "code": NODE}])
    start_run(engine, token, "f")

    def paused() -> dict[str, Any] | None:
        view: dict[str, Any] = profile_view(engine, token)
        return view if view["paused"] else None

    view = wait_for(paused, timeout=60, what="the profile to pause itself")
    said = view["paused"]
    assert said.startswith("paused after 2 failed submissions in a row (the last: "), said
    assert "generic resource" in said.lower(), "Slurm's own words name what it refused"
    assert said.endswith("resume with 'fluksio provisioners resume hpc/small'"), said
    assert view["failures"] == 2 and slurm.fluksio_jobs(tmp_path) == []
    queued = engine.client(token).request("GET", "/workers/resources").body["queued"]
    assert [call["reason"] for call in queued] == [f"provisioning hpc/small, {said}"]

    env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": token}
    status = fluksio("provisioners", "status", env=env)
    assert status.returncode == 0 and said in " ".join(status.stdout.split()), status
    last_failed = datetime.fromisoformat(view["last_error"]["at"])

    resumed = fluksio("provisioners", "resume", "hpc/small", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "hpc/small: resumed" in resumed.stdout

    def asked_again() -> dict[str, Any] | None:
        view: dict[str, Any] = profile_view(engine, token)
        error = view["last_error"]
        return view if error and datetime.fromisoformat(error["at"]) > last_failed else None

    # The site is asked again at once: it refuses again, counted from nothing.
    again = wait_for(asked_again, timeout=30, what="a submission after the resume")
    assert again["failures"] in (1, 2), again
    wait_for(paused, timeout=60, what="the profile to pause itself again, after 2 more")

    wrong = fluksio("provisioners", "resume", "hpc", env=env)
    assert wrong.returncode == 2 and "PROVISIONER/PROFILE" in wrong.stderr, wrong
