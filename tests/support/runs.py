"""Putting flows, starting runs and waiting for them, through a test engine's API."""

from __future__ import annotations

import textwrap
from typing import Any

from tests.support.engine import EngineProcess
from tests.support.http import Answer, call
from tests.support.wait import wait_for

ENDED = frozenset({"succeeded", "failed", "cancelled"})


def code(source: str) -> str:
    """Node source written indented inside a test."""
    return textwrap.dedent(source).lstrip()


def put_flow(engine: EngineProcess, token: str, name: str, nodes: list[dict[str, Any]]) -> Answer:
    return call("PUT", f"{engine.api}/flows/{name}", token=token, json_body={"nodes": nodes})


def start_run(engine: EngineProcess, token: str, name: str, **params: Any) -> dict[str, Any]:
    answer = call(
        "POST", f"{engine.api}/flows/{name}/runs", token=token, json_body={"params": params}
    )
    assert answer.status == 201, answer
    body: dict[str, Any] = answer.body
    return body


def run_flow(engine: EngineProcess, token: str, name: str, nodes: list[dict[str, Any]]) -> str:
    """Put a flow and start a run of it; the run's id."""
    assert put_flow(engine, token, name, nodes).status in (200, 201)
    return str(start_run(engine, token, name)["id"])


def get_run(engine: EngineProcess, token: str, run_id: str, wait: float = 0) -> dict[str, Any]:
    body: dict[str, Any] = call(
        "GET", f"{engine.api}/runs/{run_id}?wait={wait:g}", token=token
    ).body
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

    def reached() -> dict[str, Any] | None:
        run = get_run(engine, token, run_id, wait=1)
        return run if run["state"] in states else None

    return wait_for(reached, timeout=timeout, what=f"run {run_id} to reach {sorted(states)}")


def nodes_of(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["id"]: node for node in run["nodes"]}


def node_of(engine: EngineProcess, token: str, run_id: str, node_id: str) -> dict[str, Any]:
    return nodes_of(get_run(engine, token, run_id))[node_id]
