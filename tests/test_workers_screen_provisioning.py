"""The Workers screen's provisioners section in real Chromium, against real batch
systems: the local Slurm of ``make slurm-up`` (and its one-time-code login node) and the
Grid Engine cell of ``make gridengine-up``. The screen's other tests, and the browser
they share, are in ``tests/test_workers_screen.py``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright import sync_api as playwright

from tests.support.engine import attach_url_on, free_port, start_engine, write_provisioners
from tests.support.otp import otp_login_node
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.slurm import local_gridengine, local_slurm
from tests.test_workers_screen import LIVE_MS, _log_in, _shot, browser

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

__all__ = ["browser"]  # the shared module-scoped fixture, used by name below


def test_provisioning_shows_the_slurm_job_and_sbatchs_refusal(browser: Any, tmp_path: Path) -> None:
    slurm = local_slurm()
    port = free_port()
    data_dir = tmp_path / "data"
    common = {
        "type": "slurm",
        "login": slurm.login_with_port,
        "ssh_key": slurm.key,
        "known_hosts": slurm.known_hosts,
        "engine_url": attach_url_on(port),
        "worker_command": slurm.worker,
        "poll_interval_s": 0.3,
        "retry_base_s": 60,
        "provision_timeout_s": 0,
    }
    held = {"name": "held", "cpus": 1, "ram_mb": 200, "labels": ["hpc"]}
    held["sbatch"] = ["--begin=now+1hour"]
    # A generic resource the cluster does not have: only sbatch says so (a partition it
    # does not have is refused before any submission, as the site's limits are read).
    nowhere = {"name": "nowhere", "labels": ["gpu"], "sbatch": ["--gres=no-such:1"]}
    # The site's accounting lists no such QOS: read at the provisioner's first need.
    no_qos = {"name": "no-qos", "labels": ["tpu"], "sbatch": ["--qos=no-such-qos"]}
    config = [
        {**common, "name": "hpc", "profiles": [held]},
        {**common, "name": "cluster", "profiles": [nowhere, no_qos]},
    ]
    write_provisioners(data_dir, config)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        page = _log_in(browser, engine)
        admin = engine.login()
        noop = code("def process():\n    return 1\n")
        run_flow(engine, admin, "on-hpc", [{"id": "a", "worker": "hpc", "code": noop}])
        run_flow(engine, admin, "on-gpu", [{"id": "b", "worker": "gpu", "code": noop}])
        expect = playwright.expect
        pending = page.locator('#provisioners tr[data-profile="hpc/held"]')
        expect(pending).to_contain_text(
            re.compile(r"job \d+: PENDING \(BeginTime\)"), timeout=15000
        )
        shown = re.search(r"job (\d+): PENDING", pending.inner_text())
        assert shown is not None
        job_id = shown.group(1)
        expect(pending).to_contain_text("1 of 1 (1 queued)")
        expect(pending).to_contain_text("1 call at once on each")
        refused = page.locator('#provisioners tr[data-profile="cluster/nowhere"]')
        expect(refused).to_contain_text("Invalid generic resource (gres)", timeout=15000)
        expect(refused).to_contain_text("next try in")
        site = page.locator('#provisioners tr[data-profile="cluster/no-qos"] .site-limit')
        said = "site: profile 'no-qos' asks for QOS 'no-such-qos', which sacctmgr does not list"
        expect(site).to_have_text(
            re.compile(re.escape(said) + r" \(listed: .*normal"), timeout=15000
        )
        waiting = page.locator("#queued tr").filter(has_text="on-hpc / a")
        expect(waiting).to_contain_text(re.compile(r"provisioning hpc/held, Slurm job \d+ PENDING"))
        _shot(page, "9-provisioning")
        paused = engine.client(admin).request("POST", "/provisioners/cluster/nowhere/pause")
        assert paused.status == 200, paused
        expect(refused.locator(".badge.paused")).to_have_text("paused", timeout=LIVE_MS)
        expect(refused).to_contain_text("paused by admin; resume with", timeout=LIVE_MS)
    finally:
        engine.stop()
    # Only its own job: one an earlier test's worker still holds may be ending meanwhile.
    assert job_id not in slurm.fluksio_jobs(tmp_path), "stopping the engine cancels the pending job"
    assert slurm.job_state(job_id) in ("CANCELLED", ""), slurm.job_state(job_id)


def test_a_profile_waiting_for_a_one_time_code_says_login_needed(
    browser: Any, tmp_path: Path
) -> None:
    slurm = local_slurm()
    user = slurm.login.split("@")[0]
    with otp_login_node(tmp_path / "otp", user) as node:
        port = free_port()
        data_dir = tmp_path / "data"
        entry = {
            "type": "slurm",
            "name": "hpc",
            "transport": "openssh",
            "login": f"{user}@127.0.0.1:{node.port}",
            "ssh_key": slurm.key,
            "known_hosts": str(node.known_hosts),
            "engine_url": attach_url_on(port),
            "poll_interval_s": 0.3,
            "profiles": [{"name": "small", "labels": ["hpc"]}],
        }
        write_provisioners(data_dir, [entry])
        engine = start_engine(data_dir, tmp_path / "logs", port=port)
        try:
            page = _log_in(browser, engine)
            noop = code("def process():\n    return 1\n")
            run_flow(engine, engine.login(), "on-hpc", [{"id": "a", "worker": "hpc", "code": noop}])
            expect = playwright.expect
            row = page.locator('#provisioners tr[data-profile="hpc/small"]')
            expect(row).to_contain_text("login needed", timeout=15000)
            expect(row).to_contain_text("'fluksio provisioners login hpc'")
            waiting = page.locator("#queued tr").filter(has_text="on-hpc / a")
            expect(waiting).to_contain_text(
                "provisioning hpc/small, login needed: run 'fluksio provisioners login hpc'"
            )
            _shot(page, "10-login-needed")
        finally:
            engine.stop()


def test_grid_engine_jobs_and_their_workers_show_like_slurms(browser: Any, tmp_path: Path) -> None:
    cell = local_gridengine()
    login, port = cell.login, free_port()
    data_dir = tmp_path / "data"
    profiles = [
        {"name": "small", "cpus": 1, "ram_mb": 1024, "labels": ["sge"]},
        {"name": "nowhere", "labels": ["gpu"], "queue": "nosuch.q"},
    ]
    entry = {
        "type": "gridengine", "name": "sge", "login": login.login_with_port,
        "ssh_key": login.key, "known_hosts": login.known_hosts,
        "engine_url": attach_url_on(port), "worker_command": login.worker,
        "poll_interval_s": 0.3, "retry_base_s": 60, "max_idle_s": 60, "profiles": profiles,
    }  # fmt: skip
    write_provisioners(data_dir, [entry])
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        page = _log_in(browser, engine)
        admin = engine.login()
        noop = code("def process():\n    return 1\n")
        ran = run_flow(engine, admin, "on-sge", [{"id": "a", "worker": "sge", "code": noop}])
        run_flow(engine, admin, "on-gpu", [{"id": "b", "worker": "gpu", "code": noop}])
        node = nodes_of(wait_run(engine, admin, ran, timeout=60))["a"]
        job = node["provenance"]["batch_job"]
        assert re.fullmatch(r"Grid Engine job \d+", job), node["provenance"]
        expect = playwright.expect
        worker = page.locator('#workers tr[data-worker="sge-small"]')
        expect(worker).to_contain_text(job, timeout=LIVE_MS)
        small = page.locator('#provisioners tr[data-profile="sge/small"]')
        expect(small).to_contain_text("gridengine")
        expect(small).to_contain_text(f"sge-small (job {job.split()[-1]})")
        refused = page.locator('#provisioners tr[data-profile="sge/nowhere"]')
        expect(refused).to_contain_text(
            'qsub refused the job: Job was rejected because job requests unknown queue "nosuch.q"',
            timeout=15000,
        )
        _shot(page, "10-grid-engine")
    finally:
        engine.stop()
        # Its attached worker's job outlives the engine until idle: this engine's only.
        left = cell.fluksio_jobs(tmp_path)
        if left:
            login.ssh("qdel", *left)
