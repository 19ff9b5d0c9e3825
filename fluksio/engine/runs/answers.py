"""A run, its nodes and an array's items as a client sees them: built by the engine
straight into the wire's answer models (``GET /runs/{id}``, the answer to starting,
cancelling or retrying one, and an array's pages of items)."""

from __future__ import annotations

from typing import Any

from fluksio.engine.runs.machine.retries import most_attempts
from fluksio.engine.runs.machine.rows import NodeRow
from fluksio.engine.runs.views import RunView
from fluksio.wire.answers.runs import ArrayBody, ItemBody, NodeBody, ProvenanceBody, RunBody
from fluksio.wire.states import RunState
from fluksio.wire.times import utc

__all__ = ["item_body", "run_body"]


def _duration(row: NodeRow) -> float | None:
    if row.started_at is None or row.ended_at is None:
        return None
    return round(row.ended_at - row.started_at, 6)


def _call_fields(row: NodeRow) -> dict[str, Any]:
    """What a node and an array's item both show of their call, from its row."""
    return {
        "state": row.state,
        "attempt": row.attempt,
        "ran_on": row.place,
        "provenance": ProvenanceBody(**row.provenance.to_json())
        if row.provenance is not None
        else None,
        "started_at": utc(row.started_at),
        "ended_at": utc(row.ended_at),
        "duration_s": _duration(row),
        "result": row.result,
        "error": row.error,
        "logs": row.logs,
    }


def run_body(view: RunView) -> RunBody:
    """The run as a client sees it (``GET /runs/{id}``, and the answer to starting one)."""
    row = view.row
    most = most_attempts(row.spec)
    nodes = [
        NodeBody(
            **_call_fields(node.row),
            id=node.row.node_id,
            reason=node.reason,
            queued_at=utc(node.row.queued_at),
            events=node.events if node.events is not None else node.row.events or [],
            event_count=node.event_count,
            # A rerun after a restart is an attempt too, beyond what its retries allow.
            attempts=max(most.get(node.row.node_id, 1), node.row.attempt),
            sent_ahead=node.row.sent_ahead,
            array=ArrayBody(**node.row.array.to_json()) if node.row.array is not None else None,
        )
        for node in view.nodes
    ]
    run_reason = next((node.reason for node in nodes if node.reason), None)
    return RunBody(
        id=row.id,
        flow=row.flow,
        state=row.state,
        reason=run_reason if row.state is RunState.QUEUED else None,
        params=row.params,
        created_at=utc(row.created_at),
        started_at=utc(row.started_at),
        ended_at=utc(row.ended_at),
        nodes=nodes,
        artifacts=[
            {"node": node.id, **ref} for node in nodes for ref in _artifact_refs(node.result)
        ],
    )


def _artifact_refs(value: Any) -> list[dict[str, Any]]:
    """The artifact references inside a result (``{"digest": "sha256:...", "size", ...}``)."""
    if isinstance(value, dict):
        digest = value.get("digest")
        if isinstance(digest, str) and digest.startswith("sha256:") and "size" in value:
            return [value]
        return [ref for item in value.values() for ref in _artifact_refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in _artifact_refs(item)]
    return []


def item_body(row: NodeRow) -> ItemBody:
    return ItemBody(item=int(row.item or 0), **_call_fields(row))
