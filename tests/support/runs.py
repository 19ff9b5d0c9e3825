"""Putting flows, starting runs and waiting for them, in a synchronous test of an engine
process: the client interface's own helpers (:class:`~tests.support.client.EngineApi`),
through :class:`~tests.support.client.BlockingEngine`."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from tests.support.client import ENDED, Reply
from tests.support.engine import EngineProcess
from tests.support.worker import start_worker

__all__ = [
    "ENDED",
    "code",
    "get_run",
    "node_of",
    "nodes_of",
    "put_flow",
    "run_flow",
    "start_run",
    "wait_run",
]


def code(source: str) -> str:
    """Node source written indented inside a test."""
    return textwrap.dedent(source).lstrip()


def put_flow(engine: EngineProcess, token: str, name: str, nodes: list[dict[str, Any]]) -> Reply:
    return engine.client(token).put_flow(name, nodes)


def start_run(engine: EngineProcess, token: str, name: str, **params: Any) -> dict[str, Any]:
    return engine.client(token).start_run(name, **params)


def run_flow(engine: EngineProcess, token: str, name: str, nodes: list[dict[str, Any]]) -> str:
    """Put a flow and start a run of it; the run's id."""
    assert put_flow(engine, token, name, nodes).status in (200, 201)
    return str(start_run(engine, token, name)["id"])


def get_run(engine: EngineProcess, token: str, run_id: str, wait: float = 0) -> dict[str, Any]:
    body: dict[str, Any] = engine.client(token).request("GET", f"/runs/{run_id}?wait={wait:g}").body
    return body


def wait_run(
    engine: EngineProcess,
    token: str,
    run_id: str,
    *,
    states: frozenset[str] = ENDED,
    timeout: float = 30,
) -> dict[str, Any]:
    """The run once it is in one of ``states`` (by default: ended)."""
    return engine.client(token).wait_run(run_id, timeout, states=states)


def nodes_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["id"]: node for node in run["nodes"]}


def node_of(engine: EngineProcess, token: str, run_id: str, node_id: str) -> dict[str, Any]:
    return nodes_of(get_run(engine, token, run_id))[node_id]


def says_run_succeeded(kind: str, data: object, run_id: str) -> bool:
    """Whether a live feed's event (``kind``, ``data``) says run ``run_id`` succeeded."""
    return (
        kind == "run.state"
        and isinstance(data, dict)
        and (data.get("run_id"), data.get("state")) == (run_id, "succeeded")
    )


def result_given_secret(
    engine: EngineProcess, admin: str, *, token: str, label: str, node_code: str, log_dir: Path
) -> object:
    """What a node given the secret ``db`` returns, run on a worker attached on ``token``
    with ``label`` (started for it, stopped after)."""
    worker = start_worker(engine, token, log_dir, "--labels", label)
    try:
        secret = {"secret": {"$secret": "db"}}
        reads = {"id": "reads", "worker": label, "code": node_code, "params": secret}
        run_id = run_flow(engine, admin, "reads", [reads])
        ended = wait_run(engine, admin, run_id, timeout=60)
        assert ended["state"] == "succeeded", ended
        return node_of(engine, admin, run_id, "reads")["result"]
    finally:
        worker.stop()
