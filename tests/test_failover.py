"""Two engines on one PostgreSQL database, as a team runs them for failover: one active (it
holds the lease), one standby answering 503 with a sentence naming the active one. Real
engine and worker processes on a real PostgreSQL; a short lease (3 s), so that a
takeover is seconds.

- The active engine SIGKILLed mid-array: the standby takes over, the worker and a
  script's client (each given both engines' URLs) ride over to it, and every item ends
  once, none run twice (a ledger the items write).
- The active engine SIGSTOPped past its lease: the standby takes over and fails the call
  that ran on the stopped engine's own process; the stopped engine, continued, writes
  nothing (its call's success is not recorded over the new engine's word) and steps down.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from fluksio.client import Client
from tests.support.certs import CertificateAuthority
from tests.support.cli import fluksio
from tests.support.engine import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    free_port,
    ready,
)
from tests.support.failover import LEASE_S, Pair
from tests.support.nginx import start_nginx
from tests.support.postgres import LocalPostgres
from tests.support.runs import code, get_run, node_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import attach_url, start_worker

pytestmark = [pytest.mark.process, pytest.mark.contract]

ITEMS = 40


def _sweep(ledger: Path) -> dict[str, object]:
    """An array on the worker labelled box whose items note their start in ``ledger``."""
    items = [{"x": x} for x in range(ITEMS)]
    return {"id": "sweep", "worker": "box", "code": _ledgered(ledger), "items": items}


def _ledgered(ledger: Path) -> str:
    return code(f"""
        import os, time
        def process(x):
            with open({str(ledger)!r}, "a") as noted:
                noted.write(f"{{x}}\\n")
            time.sleep(0.2)
            return x * 3
    """)


def test_the_standby_takes_over_from_a_killed_engine_and_every_item_ends_once(
    tmp_path: Path, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    pair = Pair.start(tmp_path, pg_cluster, pg_database)
    try:
        status, said = ready(pair.second)
        assert status == 503, said
        assert f"the active engine is {pair.first.url}" in json.loads(said)["detail"]
        admin = pair.first.login()
        token = pair.first.mint(admin, "box", ["box"])["token"]
        worker = start_worker(
            pair.first, token, tmp_path / "worker", "--labels", "box", "--parallel", "2",
            "--url", attach_url(pair.second),
        )  # fmt: skip
        ledger = tmp_path / "ledger"
        sweep = _sweep(ledger)
        run_id = run_flow(pair.first, admin, "sweep", [sweep])

        def some_done() -> bool:
            counts = node_of(pair.first, admin, run_id, "sweep")["array"]["counts"]
            return int(counts.get("succeeded", 0)) >= 8

        wait_for(some_done, timeout=60, what="eight items to end on the first engine")
        # A script given both engines, waiting on the run: it rides over the switch.
        script = Client([pair.first.url, pair.second.url], token=admin)
        pair.first.stop(signal.SIGKILL)
        ended = script.wait_run(run_id, timeout=120)
        assert ended.state == "succeeded", ended
        assert script.http.base_url == pair.second.api  # asked first from now on
        # The command line alike, given both in $FLUKSIO_URL: the dead one first.
        both = {"FLUKSIO_URL": f"{pair.first.api} {pair.second.api}", "FLUKSIO_TOKEN": admin}
        shown = fluksio("runs", "show", run_id, "--json", env=both)
        assert shown.returncode == 0 and '"succeeded"' in shown.stdout, shown.stderr
        admin = pair.second.login()
        page = pair.second.client(admin).request("GET", f"/runs/{run_id}/items").body
        assert [item["result"] for item in page["items"]] == [x * 3 for x in range(ITEMS)]
        started = ledger.read_text().split()
        twice = sorted({x for x in started if started.count(x) > 1})
        assert not twice, f"items that started twice: {twice}"
        assert sorted(map(int, started)) == list(range(ITEMS))
        worker.stop()
    finally:
        pair.stop()


def test_an_engine_paused_past_its_lease_writes_nothing_and_steps_down(
    tmp_path: Path, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    pair = Pair.start(tmp_path, pg_cluster, pg_database)
    try:
        admin = pair.first.login()
        began = tmp_path / "began"
        slow = code(f"""
            import time
            def process():
                open({str(began)!r}, "w").write("began")
                time.sleep(3 * {LEASE_S})
                return "the paused engine's word"
        """)
        run_id = run_flow(pair.first, admin, "slow", [{"id": "slow", "code": slow}])
        wait_for(began.exists, timeout=30, what="the call to begin on the first engine")
        pair.first.freeze()
        wait_for(lambda: ready(pair.second)[0] == 200, timeout=30, what="the takeover")
        admin = pair.second.login()
        failed = wait_run(pair.second, admin, run_id, timeout=60)
        assert failed["state"] == "failed", failed
        # The call ends on the paused engine's process meanwhile; continued, it reads the
        # answer, and its first write finds the lease another engine's.
        wait_for(
            lambda: "the paused engine's word" not in str(get_run(pair.second, admin, run_id)),
            timeout=5,
            what="the run as the new engine wrote it",
        )
        pair.first.thaw()
        assert pair.first.process.wait(timeout=30) == 3
        assert "engine.stepped_down" in pair.first.logs() + pair.first.stdout()
        after = get_run(pair.second, admin, run_id)
        assert after["state"] == "failed", after
        assert node_of(pair.second, admin, run_id, "slow")["result"] is None
    finally:
        pair.stop()


def test_two_engines_behind_the_documented_nginx_one_taking_over(
    tmp_path: Path, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    """docs/deploying.md's failover block: a worker and a script given nginx's URL alone
    ride over the active engine's death to the one that takes over."""
    (tmp_path / "ca").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    ports, nginx_port = (free_port(), free_port()), free_port()
    public = f"https://127.0.0.1:{nginx_port}"
    pair = Pair.start(
        tmp_path, pg_cluster, pg_database,
        "--public-url", public, "--trusted-proxy", "127.0.0.1", ports=ports,
    )  # fmt: skip
    nginx = None
    try:
        nginx = start_nginx(
            tmp_path / "nginx", nginx_port, list(ports), ca.issue("proxy", ["127.0.0.1"])
        )
        script = Client(public, ca_file=str(ca.pem))
        script.login(SUPERUSER, SUPERUSER_PASSWORD)  # a POST: the standby's 503 sent on
        token = script.mint_worker_token("box", ["box"]).token
        worker = start_worker(
            pair.first, token, tmp_path / "worker", "--labels", "box", "--parallel", "2",
            "--ca-file", str(ca.pem), url=f"wss://127.0.0.1:{nginx_port}/api/v1/workers/attach",
        )  # fmt: skip
        ledger = tmp_path / "ledger"
        sweep = _sweep(ledger)
        script.put_flow("sweep", [sweep])
        run_id = script.start_run("sweep").id
        wait_for(
            lambda: len(ledger.read_text().split()) >= 8 if ledger.exists() else False,
            timeout=60,
            what="eight items to start on the first engine",
        )
        pair.first.stop(signal.SIGKILL)
        ended = script.wait_run(run_id, timeout=120)
        assert ended.state == "succeeded", ended
        started = ledger.read_text().split()
        assert sorted(map(int, started)) == list(range(ITEMS)), "an item started twice"
        worker.stop()
    finally:
        if nginx is not None:
            nginx.stop()
        pair.stop()
