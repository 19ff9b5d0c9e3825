"""Which engine of a database is active: one row (``engine_lease``) with a holder, an
epoch and an expiry, by the database's own clock (two machines' clocks never agree).

The active engine renews it every third of its length; a standby takes it once it has run
out, with the next epoch. Every write of the active engine first reads the row under a
share lock and finds its own epoch there (:class:`Fence`), so an engine that was paused or
cut off past its lease and wakes up writes nothing: its first write finds another epoch,
and it steps down. The share lock orders a takeover after any write under way, never
beside it. No PostgreSQL session lock is the leader lock: a host that dies silently would
hold one until its TCP connection times out, for hours.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow

from fluksio.engine.postgres.database import faults

__all__ = ["Lease", "LeaseRow"]

_NOW = "extract(epoch from clock_timestamp())"
_TAKE = f"""
    INSERT INTO engine_lease AS lease (id, holder, address, epoch, expires_at)
    VALUES (1, %s, %s, 1, {_NOW} + %s)
    ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, address = excluded.address,
        epoch = lease.epoch + 1, expires_at = excluded.expires_at
    WHERE lease.expires_at < {_NOW}
    RETURNING epoch
"""  # noqa: S608 (no value is put in: only the clock's expression)
_RENEW = f"""
    UPDATE engine_lease SET expires_at = {_NOW} + %s
    WHERE id = 1 AND epoch = %s AND holder = %s
    RETURNING epoch
"""  # noqa: S608
_READ = f"SELECT holder, address, epoch, expires_at - {_NOW} AS left_s FROM engine_lease"  # noqa: S608


@dataclass(frozen=True)
class LeaseRow:
    holder: str
    """The engine process holding it (host, pid and a random part)."""
    address: str
    """Where that engine is reached (its URL), for the sentences that send people there."""
    epoch: int
    left_s: float
    """Seconds until it runs out, by the database's clock (negative: run out)."""


class Lease:
    """The lease, taken, renewed and read over a connection of its own (so that a long
    transaction of the stores never holds up a renewal); each call blocks: call it off
    the event loop."""

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[DictRow]],
        *,
        holder: str,
        address: str,
        length_s: float,
    ) -> None:
        self._connect = connect
        self.holder = holder
        self.address = address
        self.length_s = length_s
        self._connection: psycopg.Connection[DictRow] | None = None
        self._lock = threading.Lock()

    def take(self) -> int | None:
        """Take the lease if it is free or has run out; its new epoch, or None."""
        row = self._run(_TAKE, (self.holder, self.address, self.length_s))
        return None if row is None else int(row["epoch"])

    def renew(self, epoch: int) -> bool:
        """Hold it ``length_s`` more; False when another engine took it meanwhile."""
        return self._run(_RENEW, (self.length_s, epoch, self.holder)) is not None

    def read(self) -> LeaseRow | None:
        row = self._run(_READ, ())
        if row is None:
            return None
        return LeaseRow(row["holder"], row["address"], int(row["epoch"]), float(row["left_s"]))

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _run(self, sql: str, params: tuple[object, ...]) -> DictRow | None:
        with self._lock, faults():
            if self._connection is None or self._connection.broken:
                self._connection = self._connect()
            return self._connection.execute(sql.encode(), params or None).fetchone()
