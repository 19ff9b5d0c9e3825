"""On the local Slurm: a profile whose workers run containers. A node naming an image its
patterns allow asks for a job; the worker in it (the cluster's unprivileged user, so
podman runs rootless) pulls the image from an OCI archive once, with the pull in the
call's output, and runs the node inside; a node in an image the profile does not allow
asks for nothing and says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.containers import ARCHIVE, OS_AND_PYTHON, need_podman
from tests.support.runs import code, get_run, nodes_of, run_flow, wait_run
from tests.support.slurm import LocalSlurm
from tests.support.slurm_engine import no_job_outlives_its_test, slurm, start
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]
__all__ = ["no_job_outlives_its_test", "slurm", "start"]  # fixtures, used by name

ARCHIVED = f"oci-archive:{ARCHIVE}"


def test_a_slurm_worker_runs_a_node_in_its_image_rootless_and_pulls_it_once(
    start: Any, slurm: LocalSlurm, tmp_path: Path
) -> None:
    need_podman()
    allowed = {"allow_images": [f"oci-archive:{ARCHIVE.parent}/*"]}
    engine, token = start(profile={"containers": allowed, "ram_mb": 600})
    in_image = {"code": code(OS_AND_PYTHON), "worker": "hpc", "container": {"image": ARCHIVED}}
    nodes = [{"id": "first", **in_image}, {"id": "second", "after": ["first"], **in_image}]
    run = wait_run(engine, token, run_flow(engine, token, "on-slurm", nodes), timeout=180)
    assert run["state"] == "succeeded", run
    found = nodes_of(run)
    for name in ("first", "second"):
        assert found[name]["result"] == {"os": "bookworm", "python": "3.11"}, found[name]
    assert found["first"]["ran_on"] == found["second"]["ran_on"], "one worker, two calls"
    client = engine.client(token)
    first = client.request("GET", f"/runs/{run['id']}/logs?node=first").body["lines"]
    second = client.request("GET", f"/runs/{run['id']}/logs?node=second").body["lines"]
    assert f"fluksio: pulling {ARCHIVED} with podman, once for this worker" in first, first
    assert any(line.startswith("running in 3.11") for line in second), second
    assert not any("pulling" in line for line in second), "pulled once per worker"

    trixie = {"image": "localhost/fluksio-test/trixie:1"}
    other = {"id": "n", "code": code(OS_AND_PYTHON), "worker": "hpc", "container": trixie}
    waiting = run_flow(engine, token, "not-on-slurm", [other])

    def reason() -> str | None:
        said = nodes_of(get_run(engine, token, waiting))["n"].get("reason") or ""
        return said if "no worker may run" in said else None

    said = wait_for(reason, timeout=30, what="the node's reason")
    assert f"profile hpc/small allows {f'oci-archive:{ARCHIVE.parent}/*'!r} (podman)" in said, said
    engine.client(token).request("POST", f"/runs/{waiting}/cancel")
