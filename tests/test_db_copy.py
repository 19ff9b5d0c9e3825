"""``fluksio db copy --to URL``: a team outgrowing one machine moves its engine's SQLite
state into PostgreSQL. Real engine processes, a real worker, a real PostgreSQL: after the
copy, an engine on the database (with a new data directory, and the old one's artifacts)
logs the same people in, takes the worker token the SQLite engine minted, gives a call
the secret it sealed, and reads the run it ran. A target that is not empty, or a data
directory an engine holds, is refused with one sentence."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.support.cli import fluksio
from tests.support.engine import engine_env, ready, start_engine
from tests.support.postgres import LocalPostgres
from tests.support.runs import code, result_given_secret, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import start_worker

pytestmark = [pytest.mark.process, pytest.mark.contract]

DOUBLE = code("""
    def process(x):
        return 2 * x
""")
REVEALS = code("""
    def process(secret):
        return secret[::-1]
""")


def test_an_engines_sqlite_state_copied_into_postgres_serves_the_same_team(
    tmp_path: Path, pg_cluster: LocalPostgres, pg_database: str
) -> None:
    data = tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1")
    admin = engine.login()
    minted = engine.mint(admin, "box", ["box"])
    engine.client(admin).request(
        "PUT", "/secrets/db", json_body={"value": "0123", "labels": ["box"]}
    )
    worker = start_worker(engine, minted["token"], tmp_path / "w1", "--labels", "box")
    items = [{"x": x} for x in range(12)]
    node = {"id": "double", "worker": "box", "code": DOUBLE, "items": items}
    run_id = run_flow(engine, admin, "double", [node])
    assert wait_run(engine, admin, run_id, timeout=60)["state"] == "succeeded"
    worker.stop()

    key = tmp_path / "engine.key"
    key.write_text(secrets.token_urlsafe(32))
    key.chmod(0o600)
    copying = ("db", "copy", "--to", pg_database, "--data-dir", str(data),
               "--database-key-file", str(key))  # fmt: skip
    env = {"PGPASSFILE": pg_cluster.passfile}
    busy = fluksio(*copying, env=env)
    assert busy.returncode == 2 and "an engine is running on" in busy.stderr, busy.stderr
    engine.stop()
    copied = fluksio(*copying, env=env)
    assert copied.returncode == 0, copied.stderr
    assert "array_items" in copied.stdout and "Copied" in copied.stdout, copied.stdout
    again = fluksio(*copying, env=env)
    assert again.returncode == 2 and "is not empty" in again.stderr, again.stderr

    on_postgres = start_engine(
        tmp_path / "data2",
        tmp_path / "logs2",
        env=engine_env(PGPASSFILE=pg_cluster.passfile),
        args=("--database", pg_database, "--database-key-file", str(key),
              "--artifacts-dir", str(data / "artifacts")),
    )  # fmt: skip
    try:
        wait_for(lambda: ready(on_postgres)[0] == 200, timeout=30, what="the engine to be active")
        admin = on_postgres.login()
        page = on_postgres.client(admin).request("GET", f"/runs/{run_id}/items").body
        assert [item["result"] for item in page["items"]] == [2 * x for x in range(12)]
        given = result_given_secret(
            on_postgres, admin, token=minted["token"], label="box", node_code=REVEALS,
            log_dir=tmp_path / "w2",
        )  # fmt: skip
        assert given == "3210"
    finally:
        on_postgres.stop()
