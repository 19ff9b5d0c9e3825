"""An engine on PostgreSQL (``fluksio serve --database``), as a team deploys it: real engine
and worker processes on a real server. Its state outlives its machine: an engine started
with a new, empty data directory on the same database, key file and artifacts directory
serves the same team (its users, one added by ``fluksio users add --database``, a worker
token the first one minted, its secrets, its runs and their items). What it is given
wrong is one sentence at start, exit 2."""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import urllib.request
from pathlib import Path

import pytest

from fluksio.client import Client
from tests.support.cli import fluksio
from tests.support.engine import engine_env, free_port, ready, start_engine
from tests.support.postgres import LocalPostgres, private_cluster
from tests.support.runs import code, get_run, node_of, result_given_secret, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import start_worker

pytestmark = [pytest.mark.contract]

SQUARE = code("""
    def process(x):
        return x * x
""")
SECRET_LENGTH = code("""
    def process(secret):
        return len(secret)
""")
ITEMS = 20
ITEMS_OF_60 = [{"x": x} for x in range(60)]


def _key_file(tmp_path: Path) -> Path:
    key = tmp_path / "engine.key"
    key.write_text(secrets.token_urlsafe(32))
    key.chmod(0o600)
    return key


@pytest.mark.process
def test_a_new_engine_on_the_same_database_serves_the_same_team(
    tmp_path: Path, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    env = engine_env(PGPASSFILE=pg_cluster.passfile)
    shared = (
        "--database",
        pg_database,
        "--database-key-file",
        str(_key_file(tmp_path)),
        "--artifacts-dir",
        str(tmp_path / "artifacts"),
        "--lease-s",
        "3",
    )
    first = start_engine(tmp_path / "data1", tmp_path / "logs1", env=env, args=shared)
    try:
        admin = first.login()
        minted = first.mint(admin, "gpu-box", ["gpu"])
        secret = {"value": "s3cr3t-value", "labels": ["gpu"]}
        first.client(admin).request("PUT", "/secrets/db", json_body=secret)
        worker = start_worker(first, minted["token"], tmp_path / "w1", "--labels", "gpu")
        sweep = {
            "id": "sweep",
            "worker": "gpu",
            "code": SQUARE,
            "items": [{"x": x} for x in range(ITEMS)],
        }
        run_id = run_flow(first, admin, "sweep", [sweep])
        assert wait_run(first, admin, run_id, timeout=60)["state"] == "succeeded"
        worker.stop()
    finally:
        first.stop(signal.SIGKILL)  # its machine gone: nothing is stopped in order
    # Nothing of the state was in the data directory.
    assert not (tmp_path / "data1" / "fluksio.sqlite3").exists()
    assert not (tmp_path / "data1" / "signing_key.pem").exists()

    # A user added on the command line, to the database, with no engine running.
    on_database = ("--database", pg_database, "--data-dir", str(tmp_path / "data3"))
    added = fluksio(
        "users", "add", "bob", "--password-stdin", *on_database,
        stdin="bob's password\n", env={"PGPASSFILE": pg_cluster.passfile},
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    second = start_engine(tmp_path / "data2", tmp_path / "logs2", env=env, args=shared)
    try:
        # A standby until the dead engine's lease runs out (--lease-s), then active.
        wait_for(lambda: ready(second)[0] == 200, timeout=30, what="the lease to be its own")
        admin = second.login()  # the same superuser, from the database
        assert second.login("bob", "bob's password")
        page = second.client(admin).request("GET", f"/runs/{run_id}/items").body
        assert [item["result"] for item in page["items"]] == [x * x for x in range(ITEMS)]
        assert node_of(second, admin, run_id, "sweep")["array"]["counts"] == {"succeeded": ITEMS}
        # The worker token the first engine minted, and the secret it sealed, are good here.
        given = result_given_secret(
            second, admin, token=minted["token"], label="gpu", node_code=SECRET_LENGTH,
            log_dir=tmp_path / "w2",
        )  # fmt: skip
        assert given == len("s3cr3t-value")
        assert get_run(second, admin, run_id)["state"] == "succeeded"
        # The key rotated on the command line, against the database: every engine of it
        # refuses the access tokens signed before, within the seconds it follows a key.
        rotated = fluksio(
            "keys", "rotate", "--yes", "--data-dir", str(tmp_path / "data3"), *shared[:4],
            env={"PGPASSFILE": pg_cluster.passfile},
        )  # fmt: skip
        assert rotated.returncode == 0, rotated.stderr
        wait_for(
            lambda: second.client(admin).request("GET", f"/runs/{run_id}").status == 401,
            timeout=10,
            what="the old access token to be refused",
        )
        assert get_run(second, second.login(), run_id)["state"] == "succeeded"
    finally:
        second.stop()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_database_that_cannot_be_used_is_one_sentence_at_start(tmp_path: Path) -> None:
    key = str(_key_file(tmp_path))
    data = ("--data-dir", str(tmp_path / "data"), "--port", "0")
    port = _closed_port()
    away = fluksio(
        "serve", *data, "--database", f"postgresql://fluksio@127.0.0.1:{port}/team",
        "--database-key-file", key,
    )  # fmt: skip
    assert away.returncode == 2, away.stderr
    said = away.stderr.strip()
    assert f"127.0.0.1:{port}/team" in said and "check that PostgreSQL runs there" in said, said
    assert "Traceback" not in said and len(said.splitlines()) == 1, said

    holds = fluksio("serve", *data, "--database", "postgresql://fluksio:hunter22@127.0.0.1/team")
    assert holds.returncode == 2 and "holds a password" in holds.stderr, holds.stderr
    assert "hunter22" not in holds.stderr + holds.stdout

    keyless = fluksio("serve", *data, "--database", "postgresql://fluksio@127.0.0.1/team")
    assert keyless.returncode == 2 and "--database-key-file" in keyless.stderr, keyless.stderr

    short = tmp_path / "short.key"
    short.write_text("too short")
    os.chmod(short, 0o600)
    weak = fluksio(
        "serve", *data, "--database", "postgresql://fluksio@127.0.0.1/team",
        "--database-key-file", str(short),
    )  # fmt: skip
    assert weak.returncode == 2 and "fewer than 32" in weak.stderr, weak.stderr


@pytest.mark.process
def test_postgres_restarted_mid_run_the_engine_carries_on_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """The database's server stopped under a running array, then started again (its own
    cluster, so that no other test's is): meanwhile the rows wait in memory, said by
    ``/healthz/ready`` and a metric; the engine opens new sessions, every item ends once,
    and it stays the active one."""
    with private_cluster(free_port()) as private:
        env = engine_env(PGPASSFILE=private.cluster.passfile)
        shared = (
            "--database", private.cluster.url, "--database-key-file", str(_key_file(tmp_path)),
        )  # fmt: skip
        engine = start_engine(tmp_path / "data", tmp_path / "logs", env=env, args=shared)
        try:
            wait_for(lambda: ready(engine)[0] == 200, timeout=30, what="the engine to be active")
            admin = engine.login()
            token = engine.mint(admin, "box", ["box"])["token"]
            worker = start_worker(engine, token, tmp_path / "w", "--labels", "box")
            ledger = tmp_path / "ledger"
            noting = code(f"""
                import time
                def process(x):
                    open({str(ledger)!r}, "a").write(f"{{x}}\\n")
                    time.sleep(0.1)
                    return x + 1
            """)
            sweep = {"id": "sweep", "worker": "box", "code": noting, "items": ITEMS_OF_60}
            run_id = run_flow(engine, admin, "sweep", [sweep])
            wait_for(
                lambda: ledger.exists() and len(ledger.read_text().split()) >= 10,
                timeout=60,
                what="ten items to begin",
            )
            private.stop()
            # The items' rows wait in memory, said to a balancer (no credentials needed).
            wait_for(lambda: ready(engine)[0] == 503, timeout=5, what="the engine not ready")
            private.start()
            script = Client(engine.url, token=admin)  # rides over the 503s meanwhile
            ended = script.wait_run(run_id, timeout=120)
            assert ended.state == "succeeded", ended
            page = engine.client(admin).request("GET", f"/runs/{run_id}/items?limit=100").body
            assert [item["result"] for item in page["items"]] == [x + 1 for x in range(60)]
            begun = ledger.read_text().split()
            assert sorted(map(int, begun)) == list(range(60)), "an item began twice"
            assert engine.process.poll() is None and ready(engine)[0] == 200
            asked = urllib.request.Request(
                f"{engine.url}/metrics", headers={"Authorization": f"Bearer {admin}"}
            )
            with urllib.request.urlopen(asked, timeout=10) as answer:
                scraped = answer.read().decode()
            failures = re.search(r"^fluksio_store_write_failures_total (\S+)$", scraped, re.M)
            assert failures is not None and float(failures.group(1)) >= 1, scraped
            worker.stop()
        finally:
            engine.stop()
