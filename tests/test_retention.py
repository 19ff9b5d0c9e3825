"""Deleting runs: one by one, and by age in the background, with the artifacts nobody
needs; in the test's process, on a clock the test moves."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.wait import poll_async

SAVES = """
import fluksio

def process(n):
    own = fluksio.save_artifact(f"run {n}".encode(), name="own.txt")
    shared = fluksio.save_artifact(b"the same in every run", name="shared.txt")
    return {"own": own, "shared": shared}
"""

WAITS = """
import os, time

def process(gate):
    while not os.path.exists(gate):
        time.sleep(0.02)
    return 1
"""


def _object(data_dir: Path, content: bytes) -> Path:
    hex_digest = hashlib.sha256(content).hexdigest()
    return data_dir / "artifacts" / "sha256" / hex_digest[:2] / hex_digest


async def _run(api: InProcessEngine, flow: str, **params: Any) -> dict[str, Any]:
    run: dict[str, Any] = await api.wait_run((await api.start_run(flow, **params))["id"])
    assert run["state"] == "succeeded", run
    return run


async def _aging(
    aiohttp_client: ClientFactory, data_dir: Path
) -> tuple[InProcessEngine, ManualClock]:
    """An engine keeping runs an hour, pruning every minute, on a clock the test moves."""
    clock = ManualClock(time.time())
    api = await start_in_process(
        aiohttp_client, data_dir, clock=clock, keep_runs_s=3600, prune_every_s=60
    )
    return api, clock


async def test_ended_runs_past_the_age_go_with_the_artifacts_only_they_named(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    api, clock = await _aging(aiohttp_client, data_dir)
    await api.put_flow("saves", [{"id": "n", "code": SAVES}])
    await api.put_flow("waits", [{"id": "w", "code": WAITS}])
    old = [(await _run(api, "saves", n=n))["id"] for n in range(150)]
    clock.advance(1800)
    kept = [(await _run(api, "saves", n=n))["id"] for n in range(10)]  # runs 0-9's content
    # A call in flight when the old runs go: what it saved may not be named by a result yet.
    gate = tmp_path / "gate"
    in_flight = (await api.start_run("waits", gate=str(gate)))["id"]

    async def pruned() -> list[dict[str, Any]] | None:
        listed: list[dict[str, Any]] = (await api.request("GET", "/runs?limit=1000")).body
        # The store is swept after the runs went (off the event loop): to its end.
        swept = not any(_object(data_dir, f"run {n}".encode()).exists() for n in range(10, 150))
        return listed if len(listed) == 11 and swept else None

    clock.advance(1900)  # once: the old runs are past the age, the kept ones are not
    listed = await poll_async(pruned, timeout=30, what="the old runs to go")
    assert {r["id"] for r in listed} == {*kept, in_flight}
    assert (await api.request("GET", f"/runs/{old[0]}")).status == 404
    assert (await api.request("GET", f"/runs/{old[-1]}")).status == 404, "in batches of 100"
    for run_id in kept:
        assert (await api.request("GET", f"/runs/{run_id}")).status == 200
    # What a kept run names stays; what only deleted runs named is gone.
    for n in range(10):
        assert _object(data_dir, f"run {n}".encode()).exists(), n
    assert _object(data_dir, b"the same in every run").exists()
    gate.touch()
    assert (await api.wait_run(in_flight))["state"] == "succeeded"


async def test_a_run_is_deleted_once_it_has_ended(api: InProcessEngine, tmp_path: Path) -> None:
    await api.put_flow("waits", [{"id": "w", "code": WAITS}])
    gate = tmp_path / "gate"
    run_id = (await api.start_run("waits", gate=str(gate)))["id"]
    running = await api.request("DELETE", f"/runs/{run_id}")
    assert running.status == 409, running.body
    assert (
        running.body["detail"] == f"run {run_id} has not ended (running): cancel it, then delete it"
    )
    gate.touch()
    assert (await api.wait_run(run_id))["state"] == "succeeded"
    deleted = await api.request("DELETE", f"/runs/{run_id}")
    assert (deleted.status, deleted.body) == (200, {"deleted": run_id})
    assert (await api.request("GET", f"/runs/{run_id}")).status == 404, "not even from memory"
    again = await api.request("DELETE", f"/runs/{run_id}")
    assert again.status == 404 and again.body["detail"] == f"no run with id {run_id!r}"


async def test_a_transient_flow_goes_with_its_last_run_and_the_artifact_only_it_named(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # The Python executor's flows are transient: a map's arguments (an artifact among
    # them) do not outlive the runs that used them; a flow of one's own stays.
    data_dir = tmp_path / "data"
    api, clock = await _aging(aiohttp_client, data_dir)
    headers = {"Authorization": f"Bearer {api.token}"}
    given = b"the input a map was given"
    async with api.client.put("/api/v1/artifacts?name=in", data=given, headers=headers) as put:
        assert put.status == 201
        reference = await put.json()
    node = {"id": "n", "code": "def process(data):\n    return 1\n", "params": {"data": reference}}
    made = await api.request("PUT", "/flows/py.map?transient=true", json_body={"nodes": [node]})
    assert made.status == 201 and made.body["transient"] is True
    await api.put_flow("mine", [{"id": "n", "code": "def process():\n    return 2\n"}])
    await _run(api, "py.map")
    await _run(api, "mine")
    bad = await api.request("PUT", "/flows/x?transient=yes", json_body={"nodes": [node]})
    assert bad.status == 422 and bad.body["field"] == "transient"

    async def pruned() -> bool | None:
        listed = (await api.request("GET", "/runs")).body
        return (not listed and not _object(data_dir, given).exists()) or None

    clock.advance(3700)
    await poll_async(pruned, timeout=30, what="the runs, the flow and the input to go")
    assert (await api.request("GET", "/flows/py.map")).status == 404
    assert (await api.request("GET", "/flows/mine")).status == 200


async def test_what_an_arrays_items_saved_stays_with_their_run_and_goes_with_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    api, clock = await _aging(aiohttp_client, data_dir)
    for name, first in (("old", 1000), ("new", 2000)):
        items = [{"n": first + i} for i in range(3)]
        await api.put_flow(name, [{"id": "sweep", "code": SAVES, "items": items}])
    old = (await _run(api, "old"))["id"]
    clock.advance(1800)
    kept = (await _run(api, "new"))["id"]

    async def pruned() -> bool:
        gone = (await api.request("GET", f"/runs/{old}")).status == 404
        swept = not any(_object(data_dir, f"run {n}".encode()).exists() for n in (1000, 1002))
        return gone and swept

    clock.advance(1900)
    await poll_async(pruned, timeout=30, what="the old array's run and what it saved to go")
    assert (await api.request("GET", f"/runs/{kept}/items")).status == 200
    for n in (2000, 2001, 2002):  # named only by the kept run's items' results
        assert _object(data_dir, f"run {n}".encode()).exists(), n
