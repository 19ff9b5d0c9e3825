"""Two engines of one PostgreSQL database, as a team runs them for failover: the first
started is the active one, the second the standby."""

from __future__ import annotations

import secrets
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.engine import (
    EngineProcess,
    engine_env,
    free_port,
    ready,
    start_engine,
    write_provisioners,
)
from tests.support.postgres import LocalPostgres
from tests.support.wait import wait_for

__all__ = ["LEASE_S", "Pair"]

LEASE_S = 3.0
"""A short lease, so that a takeover is seconds."""


@dataclass
class Pair:
    """Two engines of one database: ``first`` started first (so active), ``second``."""

    first: EngineProcess
    second: EngineProcess

    @classmethod
    def start(
        cls,
        tmp_path: Path,
        cluster: LocalPostgres,
        database: str,
        *more: str,
        ports: tuple[int, int] | None = None,
        provisioners: list[dict[str, Any]] | None = None,
    ) -> Pair:
        """``more``: options both engines are given; ``ports``: theirs (else free ones);
        ``provisioners``: the provisioners.json both are given."""
        first_port, second_port = ports or (free_port(), free_port())
        if provisioners is not None:
            for data in ("data1", "data2"):
                write_provisioners(tmp_path / data, provisioners)
        key = tmp_path / "engine.key"
        key.write_text(secrets.token_urlsafe(32))
        key.chmod(0o600)
        env = engine_env(PGPASSFILE=cluster.passfile)
        shared = (
            "--database", database, "--database-key-file", str(key),
            "--artifacts-dir", str(tmp_path / "artifacts"), "--lease-s", str(LEASE_S), *more,
        )  # fmt: skip
        first = start_engine(
            tmp_path / "data1", tmp_path / "logs1", env=env, args=shared, port=first_port
        )
        wait_for(lambda: ready(first)[0] == 200, timeout=30, what="the first to be active")
        second = start_engine(
            tmp_path / "data2", tmp_path / "logs2", env=env, args=shared, port=second_port
        )
        return cls(first, second)

    def stop(self) -> None:
        for engine in (self.first, self.second):
            engine.stop(signal.SIGKILL)
