"""The PostgreSQL cluster ``make postgres-up`` brings up, and a database of a test's own
on it (made empty, dropped after). Without the cluster a test skips, and fails under
``CI=true``."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from tests.support.ci import cannot_run

__all__ = ["LocalPostgres", "PrivateCluster", "fresh_database", "local_postgres", "private_cluster"]

STATE = Path("/var/lib/fluksio-postgres")
CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LocalPostgres:
    url: str
    """``postgresql://USER@127.0.0.1:PORT/DB``: no password in it."""
    passfile: str
    """Where libpq reads the role's password (``PGPASSFILE``)."""

    def connect(self, url: str | None = None) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(url or self.url, passfile=self.passfile, connect_timeout=10)


def local_postgres() -> LocalPostgres:
    env_file = STATE / "env"
    if not env_file.exists():
        cannot_run(f"no local PostgreSQL ({env_file} missing): run `make postgres-up` as root")
    facts = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    return LocalPostgres(url=facts["URL"], passfile=facts["PGPASSFILE"])


@contextmanager
def fresh_database(cluster: LocalPostgres) -> Iterator[str]:
    """The URL of an empty database of this test's own, dropped when the block is left."""
    name = f"test_{secrets.token_hex(6)}"
    _create(cluster, name)
    try:
        yield cluster.url.rsplit("/", 1)[0] + "/" + name
    finally:
        _drop(cluster, name)


def _create(cluster: LocalPostgres, name: str) -> None:
    """CREATE DATABASE copies ``template1``, and refuses while another session is on it:
    another test's CREATE at the same moment. Tried again a few times, then said."""
    for attempt in range(20):
        try:
            with cluster.connect() as admin:
                admin.autocommit = True  # CREATE DATABASE runs outside a transaction
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return
        except psycopg.errors.ObjectInUse:
            if attempt == 19:
                raise
            time.sleep(0.05 * (attempt + 1))  # a pause between tries, not a wait for a state


def _drop(cluster: LocalPostgres, name: str) -> None:
    """DROP DATABASE ... WITH (FORCE) ends the sessions on it, but may not end an
    autovacuum worker's (the server's own role): one on the fresh database's tables is
    done within moments. Tried again a few times, then said."""
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    for attempt in range(20):
        try:
            with cluster.connect() as admin:
                admin.autocommit = True
                admin.execute(drop)
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if attempt == 19:
                raise
            time.sleep(0.1 * (attempt + 1))  # a pause between tries, not a wait for a state


@dataclass(frozen=True)
class PrivateCluster:
    """A PostgreSQL cluster of one test's own (``scripts/postgres-up.sh`` with a state
    directory and a port of its own), for what the shared one must not undergo: stopped
    and started again under a running engine."""

    cluster: LocalPostgres
    state: Path

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: every session is ended, and no new one is taken."""
        self._pg_ctl("-m", "fast", "stop")

    def start(self) -> None:
        """Started again on its port, as :func:`private_cluster` first started it."""
        port = self.cluster.url.rsplit(":", 1)[1].split("/", 1)[0]
        run = self.state / "run"
        options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={run}"
        self._pg_ctl("-l", str(self.state / "log"), "start", "-o", options)

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(pg_ctl), "-D", str(self.state / "data"),
             "-w", "-t", "60", *args],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip


@contextmanager
def private_cluster(port: int) -> Iterator[PrivateCluster]:
    if os.geteuid() != 0 or not (CHECKOUT / "scripts" / "postgres-up.sh").exists():
        cannot_run("a private PostgreSQL cluster is made as root (scripts/postgres-up.sh)")
    state = STATE.parent / f"fluksio-postgres-{secrets.token_hex(4)}"
    env = dict(os.environ, FLUKSIO_POSTGRES_STATE=str(state), FLUKSIO_POSTGRES_PORT=str(port))
    up = subprocess.run(
        ["bash", str(CHECKOUT / "scripts" / "postgres-up.sh")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr
        facts = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
        yield PrivateCluster(LocalPostgres(facts["URL"], facts["PGPASSFILE"]), state)
    finally:
        subprocess.run(
            ["bash", str(CHECKOUT / "scripts" / "postgres-down.sh")],
            env=env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        shutil.rmtree(state, ignore_errors=True)
