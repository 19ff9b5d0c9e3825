"""Flows and runs in the database: every transition of a run is written as it happens."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fluksio.agent.protocol.codec import decoded, encode
from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database
from fluksio.engine.runs.machine.rows import ArraySummary, NodeRow, RunRow
from fluksio.engine.workers.connection.holder import Holder
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import NodeState, RunState

__all__ = ["FlowRecord", "FlowStore", "RunStore", "node_row", "stored_ref"]


@dataclass(frozen=True)
class FlowRecord:
    name: str
    spec: dict[str, Any]
    created_at: float
    updated_at: float
    transient: bool = False
    """Made for one script's calls: deleted once no kept run is of it (the retention)."""


class FlowStore:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock

    def put(self, name: str, spec: dict[str, Any], *, transient: bool = False) -> bool:
        """Create or replace; True when it was created."""
        now = self._clock.now()
        existed = self.get(name) is not None
        self._db.execute(
            "INSERT INTO flows (name, spec, created_at, updated_at, transient)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(name) DO UPDATE SET spec = excluded.spec,"
            " updated_at = excluded.updated_at, transient = excluded.transient",
            (name, json.dumps(spec), now, now, int(transient)),
        )
        return not existed

    def get(self, name: str) -> FlowRecord | None:
        row = self._db.execute("SELECT * FROM flows WHERE name = ?", (name,)).fetchone()
        return None if row is None else _flow(row)

    def all(self) -> list[FlowRecord]:
        return [_flow(row) for row in self._db.execute("SELECT * FROM flows ORDER BY name")]

    def delete(self, name: str) -> bool:
        return self._db.execute("DELETE FROM flows WHERE name = ?", (name,)).rowcount > 0

    def delete_transient_before(self, cutoff: float) -> int:
        """Delete the transient flows last put before ``cutoff`` that no kept run is of;
        how many."""
        return self._db.execute(
            "DELETE FROM flows WHERE transient = 1 AND updated_at < ?"
            " AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.flow = flows.name)",
            (cutoff,),
        ).rowcount


def _flow(row: Any) -> FlowRecord:
    return FlowRecord(
        row["name"],
        json.loads(row["spec"]),
        row["created_at"],
        row["updated_at"],
        bool(row["transient"]),
    )


_DIGEST_IN_TEXT = re.compile(r"sha256:([0-9a-f]{64})")

_NODE_COLUMNS = (
    "state",
    "call_id",
    "place",
    "queued_at",
    "started_at",
    "ended_at",
    "result",
    "error",
    "logs",
    "events",
    "provenance",
    "attempt",
    "interruptions",
    "crashes",
    "checkpoint",
    "holder",
)
_ITEM_KEY = ("run_id", "node_id", "idx")


def stored_ref(text: str | None) -> ArtifactRef | None:
    """An artifact reference as the store keeps it (its JSON: a checkpoint), or None."""
    return None if not text else decoded(ArtifactRef, json.loads(text), "checkpoint")


def node_row(row: Any) -> NodeRow:
    """A node's row, or an array item's (from ``array_items``)."""
    keys = row.keys()
    summary = row["array_summary"] if "array_summary" in keys else None
    return NodeRow(
        node_id=row["node_id"],
        state=NodeState(row["state"]),
        call_id=row["call_id"],
        place=row["place"],
        queued_at=row["queued_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        result=json.loads(row["result"]) if row["result"] is not None else None,
        error=json.loads(row["error"]) if row["error"] is not None else None,
        logs=row["logs"] or "",
        events=json.loads(row["events"]) if row["events"] is not None else None,
        provenance=Provenance.from_json(json.loads(row["provenance"]))
        if row["provenance"] is not None
        else None,
        attempt=row["attempt"],
        interruptions=row["interruptions"],
        crashes=tuple(json.loads(row["crashes"])) if row["crashes"] else (),
        checkpoint=stored_ref(row["checkpoint"]),
        item=row["idx"] if "idx" in keys else None,
        array=ArraySummary.from_json(json.loads(summary)) if summary is not None else None,
        holder=Holder.parse(row["holder"]),
    )


def _columns(n: NodeRow) -> tuple[object, ...]:
    """A row's values in the order of ``_NODE_COLUMNS``."""
    return (
        n.state,
        n.call_id,
        n.place,
        n.queued_at,
        n.started_at,
        n.ended_at,
        None if n.result is None else json.dumps(n.result),
        None if n.error is None else json.dumps(n.error),
        n.logs,
        None if n.events is None else json.dumps(n.events),
        None if n.provenance is None else json.dumps(n.provenance.to_json()),
        n.attempt,
        n.interruptions,
        json.dumps(n.crashes) if n.crashes else None,
        None if n.checkpoint is None else encode(n.checkpoint),
        n.holder.text() if n.holder is not None else None,
    )


_SAVE_NODE = (
    f"UPDATE node_runs SET {', '.join(f'{c} = ?' for c in _NODE_COLUMNS)},"  # noqa: S608
    " array_summary = ? WHERE run_id = ? AND node_id = ?"
)
_SAVE_ITEM = (
    f"INSERT INTO array_items ({', '.join(_NODE_COLUMNS + _ITEM_KEY)})"  # noqa: S608
    f" VALUES ({', '.join('?' * (len(_NODE_COLUMNS) + len(_ITEM_KEY)))})"
    " ON CONFLICT (run_id, node_id, idx) DO UPDATE SET"
    f" {', '.join(f'{c} = excluded.{c}' for c in _NODE_COLUMNS)}"
)


def _run(row: Any) -> RunRow:
    return RunRow(
        id=row["id"],
        flow=row["flow"],
        spec=json.loads(row["spec"]),
        params=json.loads(row["params"]),
        state=RunState(row["state"]),
        created_at=row["created_at"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
    )


class RunStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    def create(self, run: RunRow, nodes: Iterable[NodeRow]) -> None:
        with self._db.transaction() as connection:
            connection.execute(
                "INSERT INTO runs (id, flow, spec, params, state, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run.id,
                    run.flow,
                    json.dumps(run.spec),
                    json.dumps(run.params),
                    run.state,
                    run.created_at,
                ),
            )
            connection.executemany(
                "INSERT INTO node_runs (run_id, node_id, state, array_summary) VALUES (?, ?, ?, ?)",
                [
                    (
                        run.id,
                        node.node_id,
                        node.state,
                        None if node.array is None else json.dumps(node.array.to_json()),
                    )
                    for node in nodes
                ],
            )

    def save_nodes(self, run_id: str, nodes: Iterable[NodeRow]) -> None:
        """Write the given nodes' state (all columns) in one transaction."""
        self.save_many([(run_id, list(nodes))])

    def save_many(
        self, batches: Iterable[tuple[str, list[NodeRow]]], runs: Iterable[RunRow] = ()
    ) -> None:
        """Write the nodes of several runs, and the state of ``runs``, in one transaction:
        a run's end becomes visible with its nodes' final states, never before them."""
        run_rows = [(run.state, run.started_at, run.ended_at, run.id) for run in runs]
        rows, items = [], []
        for run_id, nodes in batches:
            for n in nodes:
                if n.item is not None:
                    items.append((*_columns(n), run_id, n.node_id, n.item))
                else:
                    summary = None if n.array is None else json.dumps(n.array.to_json())
                    rows.append((*_columns(n), summary, run_id, n.node_id))
        if not rows and not run_rows and not items:
            return
        with self._db.transaction() as connection:
            if rows:
                connection.executemany(_SAVE_NODE, rows)
            if items:
                connection.executemany(_SAVE_ITEM, items)
            if run_rows:
                connection.executemany(
                    "UPDATE runs SET state = ?, started_at = ?, ended_at = ? WHERE id = ?",
                    run_rows,
                )

    def get(self, run_id: str) -> tuple[RunRow, list[NodeRow]] | None:
        row = self._db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            return None
        run = _run(row)
        # In the flow's order, which the run's spec keeps (a row has no order of its own).
        order = {node["id"]: at for at, node in enumerate(run.spec.get("nodes", ()))}
        nodes = [
            node_row(n)
            for n in self._db.execute("SELECT * FROM node_runs WHERE run_id = ?", (run_id,))
        ]
        return run, sorted(nodes, key=lambda node: order.get(node.node_id, len(order)))

    def find(
        self,
        *,
        flow: str | None,
        state: RunState | None,
        limit: int,
        since: float | None = None,
    ) -> list[RunRow]:
        """The newest runs (``limit`` at most), of ``flow``, in ``state``, created at
        ``since`` or after, as asked."""
        clauses: list[str] = []
        values: list[object] = []
        if since is not None:
            clauses.append("created_at >= ?")
            values.append(since)
        if flow is not None:
            clauses.append("flow = ?")
            values.append(flow)
        if state is not None:
            clauses.append("state = ?")
            values.append(state)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(
            f"SELECT * FROM runs {where} ORDER BY created_at DESC, id LIMIT ?",  # noqa: S608
            (*values, limit),
        )
        return [_run(row) for row in rows]

    def reopen(self, run_id: str, again: Iterable[NodeRow]) -> None:
        """An ended run runs again: these of its nodes, and the run itself, are
        unfinished once more (as the rows say)."""
        self.save_many([(run_id, list(again))])
        self._db.execute(
            "UPDATE runs SET state = ?, ended_at = NULL WHERE id = ?", (RunState.RUNNING, run_id)
        )

    def delete(self, run_id: str) -> bool:
        """Delete an ended run and its nodes; False when there is no such ended run."""
        with self._db.transaction() as connection:
            deleted = connection.execute(
                "DELETE FROM runs WHERE id = ? AND ended_at IS NOT NULL", (run_id,)
            )
            return deleted.rowcount > 0

    def delete_ended_before(self, cutoff: float, most: int) -> list[str]:
        """Delete up to ``most`` runs that ended before ``cutoff``, oldest first, in one
        transaction; their ids."""
        with self._db.transaction() as connection:
            rows = connection.execute(
                "SELECT id FROM runs WHERE ended_at IS NOT NULL AND ended_at < ?"
                " ORDER BY ended_at LIMIT ?",
                (cutoff, most),
            ).fetchall()
            ids = [row["id"] for row in rows]
            connection.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in ids])
        return ids

    def referenced_digests(self) -> set[str]:
        """The artifact digests (hex) any run or flow mentions: in its parameters, its
        nodes' parameters, results, events or checkpoints, its array items' likewise."""
        found: set[str] = set()
        saved = "coalesce(result, '') || coalesce(events, '') || coalesce(checkpoint, '')"
        mentions = "result LIKE '%sha256:%' OR events LIKE '%sha256:%' OR checkpoint IS NOT NULL"
        queries = (
            "SELECT spec || params AS text FROM runs"
            " WHERE spec LIKE '%sha256:%' OR params LIKE '%sha256:%'",
            f"SELECT {saved} AS text FROM node_runs WHERE {mentions}",  # noqa: S608
            "SELECT spec AS text FROM flows WHERE spec LIKE '%sha256:%'",
            f"SELECT {saved} AS text FROM array_items WHERE {mentions}",  # noqa: S608
        )
        for query in queries:
            for row in self._db.execute(query):
                found.update(_DIGEST_IN_TEXT.findall(row["text"]))
        return found

    def unfinished(self) -> list[tuple[RunRow, list[NodeRow]]]:
        rows = self._db.execute(
            "SELECT id FROM runs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')"
            " ORDER BY created_at"
        ).fetchall()
        found = [self.get(row["id"]) for row in rows]
        return [item for item in found if item is not None]
