"""Arrays: one node, many items, each a call of its own, read by pages.

In the test's process: the engine's own launcher runs the items in real processes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from fluksio.cli import cli
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.wait import poll_async

SQUARE = """
def process(x, offset=0):
    if x == 3:
        raise ValueError("no threes")
    return x * x + offset
"""


async def _items(api: InProcessEngine, run_id: str, query: str = "") -> dict[str, Any]:
    reply = await api.request("GET", f"/runs/{run_id}/items{query}")
    assert reply.status == 200, reply.body
    body: dict[str, Any] = reply.body
    return body


async def test_an_array_runs_each_item_as_a_call_and_counts_them(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    items = [{"x": x} for x in range(7)]
    node = {"id": "sweep", "code": SQUARE, "params": {"offset": 1}, "items": items}
    assert (await api.put_flow("sweep", [node])).status == 201
    run = await api.start_run("sweep")
    ended = await api.wait_run(run["id"], timeout=60)
    assert ended["state"] == "failed"
    sweep = nodes_of(ended)["sweep"]
    assert sweep["array"]["total"] == 7
    assert sweep["array"]["counts"] == {"succeeded": 6, "failed": 1}
    (failure,) = sweep["array"]["failures"]
    assert failure["item"] == 3 and failure["error"]["type"] == "ValueError"
    assert "1 of 7 items failed" in sweep["error"]["message"]
    page = await _items(api, run["id"], "?limit=4")
    assert [i["item"] for i in page["items"]] == [0, 1, 2, 3]
    assert [i["result"] for i in page["items"][:3]] == [1, 2, 5]
    assert page["items"][3]["state"] == "failed"
    assert page["next"] == 3
    rest = await _items(api, run["id"], "?after=3")
    assert [i["result"] for i in rest["items"]] == [17, 26, 37]
    assert rest["next"] is None
    failed = await _items(api, run["id"], "?state=failed")
    assert [i["item"] for i in failed["items"]] == [3]


async def test_items_come_from_artifacts_of_json_lines(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    digests = []
    # Two artifacts, and more items than the 1,024 the engine puts in line at once.
    for lines in (range(0, 1000), range(1000, 1500)):
        data = "".join(json.dumps({"x": x + 10}) + "\n" for x in lines).encode()
        reply = await api.request("PUT", "/artifacts", data=data)
        assert reply.status in (200, 201), reply.body
        digests.append(reply.body["digest"])
    node = {"id": "sweep", "code": "def process(x):\n    return x\n", "items_from": digests}
    assert (await api.put_flow("many", [node])).status == 201
    run = await api.start_run("many")
    ended = await api.wait_run(run["id"], timeout=120)
    assert ended["state"] == "succeeded", nodes_of(ended)["sweep"]
    assert nodes_of(ended)["sweep"]["array"]["counts"] == {"succeeded": 1500}
    results = []
    after = -1
    while after is not None:
        page = await _items(api, run["id"], f"?after={after}&limit=600")
        results += [i["result"] for i in page["items"]]
        after = page["next"]
    assert results == [x + 10 for x in range(1500)]


SLEEPS = """
import time

def process(x):
    time.sleep(300)
"""


async def _sleepy(
    aiohttp_client: ClientFactory, tmp_path: Path, count: int
) -> tuple[InProcessEngine, dict[str, Any]]:
    """An engine (four slots) running an array of ``count`` items that sleep."""
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    node = {"id": "sweep", "code": SLEEPS, "items": [{"x": x} for x in range(count)]}
    await api.put_flow("sleepy", [node])
    return api, await api.start_run("sleepy")


async def _four_running(api: InProcessEngine, run_id: str) -> None:
    async def four() -> bool:
        counts: dict[str, int] = nodes_of(await api.run(run_id))["sweep"]["array"]["counts"]
        return counts.get("running") == 4

    await poll_async(four, timeout=30, what="four items running, the engine's four slots")


async def test_cancelling_an_array_stops_its_running_items_and_runs_no_more(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, run = await _sleepy(aiohttp_client, tmp_path, 40)
    await _four_running(api, run["id"])
    assert nodes_of(await api.run(run["id"]))["sweep"]["array"]["counts"]["queued"] == 36
    cancel = await api.request("POST", f"/runs/{run['id']}/cancel?wait=30")
    assert cancel.status == 200 and cancel.body["state"] == "cancelled", cancel.body
    sweep = nodes_of(cancel.body)["sweep"]
    assert sweep["state"] == "cancelled"
    assert sweep["array"]["counts"] == {"cancelled": 40}
    page = await _items(api, run["id"], "?limit=100")
    assert {item["state"] for item in page["items"]} == {"cancelled"}
    assert sum(1 for item in page["items"] if item["started_at"]) == 4, "only four ever ran"


FLAKY_THREE = """
import os

def process(x, fixed):
    if x == 3 and not os.path.exists(fixed):
        raise ValueError("three is broken")
    return x * 10
"""


async def test_the_failed_items_of_an_ended_run_run_again_in_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    fixed = tmp_path / "fixed"
    node = {
        "id": "sweep",
        "code": FLAKY_THREE,
        "params": {"fixed": str(fixed)},
        "items": [{"x": x} for x in range(6)],
    }
    after = {"id": "report", "code": "def process():\n    return 'done'\n"}
    await api.put_flow("flaky", [node, after])
    run = await api.start_run("flaky")
    assert (await api.wait_run(run["id"], timeout=60))["state"] == "failed"
    refused = await api.request("POST", "/runs/nope/retry")
    assert refused.status == 404
    fixed.write_text("yes")
    again = await api.request("POST", f"/runs/{run['id']}/retry")
    assert again.status == 200, again.body
    assert again.body["state"] in ("queued", "running")
    ended = await api.wait_run(run["id"], timeout=60)
    assert ended["state"] == "succeeded"
    assert nodes_of(ended)["sweep"]["array"]["counts"] == {"succeeded": 6}
    page = await _items(api, run["id"])
    assert [item["result"] for item in page["items"]] == [0, 10, 20, 30, 40, 50]
    assert [item["attempt"] for item in page["items"]] == [1, 1, 1, 2, 1, 1]
    twice = await api.request("POST", f"/runs/{run['id']}/retry")
    assert twice.status == 409 and "only a failed run" in twice.body["detail"]


async def test_a_waiting_array_is_listed_once_with_how_many_of_its_items_wait(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    items = [{"x": x} for x in range(3000)]
    node = {"id": "sweep", "code": SQUARE, "worker": "gpu", "items": items}
    await api.put_flow("parked", [node])
    run = await api.start_run("parked")
    resources = (await api.request("GET", "/workers/resources")).body
    (waiting,) = resources["queued"]
    assert (waiting["run_id"], waiting["node"], waiting["items"]) == (run["id"], "sweep", 3000)
    assert waiting["reason"] == "3,000 items of sweep wait: no attached worker carries label 'gpu'"
    shown = nodes_of(await api.run(run["id"]))["sweep"]
    assert shown["state"] == "queued" and shown["array"]["counts"] == {"queued": 3000}


async def _cli(api: InProcessEngine, *args: str) -> Result:
    """The command line against this engine, on a thread (the engine answers meanwhile)."""
    env = {"FLUKSIO_URL": str(api.client.make_url("/api/v1")), "FLUKSIO_TOKEN": api.token}
    return await asyncio.to_thread(CliRunner().invoke, cli, list(args), env=env)


async def test_chosen_items_are_cancelled_whether_running_in_line_or_not_yet_read(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, run = await _sleepy(aiohttp_client, tmp_path, 3000)
    await _four_running(api, run["id"])
    # Item 0 runs, item 10 is in line, item 2500 has not been read from the source yet.
    done = await _cli(api, "runs", "cancel", run["id"], "--items", "0,10,2500")
    assert done.exit_code == 0, done.output
    assert "3,000 items:" in done.output and "2 cancelled" in done.output

    async def three_cancelled() -> dict[str, Any] | None:
        page = await _items(api, run["id"], "?state=cancelled")
        return page if [i["item"] for i in page["items"]] == [0, 10, 2500] else None

    cancelled = await poll_async(three_cancelled, timeout=30, what="three items cancelled")
    assert [i["started_at"] is not None for i in cancelled["items"]] == [True, False, False]
    # The slot item 0 freed is taken by the next in line: the rest go on.
    await _four_running(api, run["id"])
    counts = nodes_of(await api.run(run["id"]))["sweep"]["array"]["counts"]
    assert counts["cancelled"] == 3, counts
    listed = await _cli(api, "runs", "items", run["id"], "--state", "cancelled")
    assert listed.exit_code == 0 and "2500" in listed.output, listed.output
    bad = await _cli(api, "runs", "cancel", run["id"], "--items", "3-x")
    assert bad.exit_code == 2 and "positions like 3,17,40-49" in bad.output
    assert (await api.request("POST", f"/runs/{run['id']}/cancel?wait=30")).status == 200


TALKS = """
import os, time

def process(x, gate):
    print(f"item {x} starts", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)  # held by its test
    print(f"item {x} ends", flush=True)
    return x
"""


async def test_each_item_has_its_own_output_live_and_stored(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    gate = tmp_path / "gate"
    items = [{"x": x} for x in range(3)]
    node = {"id": "sweep", "code": TALKS, "params": {"gate": str(gate)}, "items": items}
    await api.put_flow("talks", [node])
    run = await api.start_run("talks")

    async def live_line() -> dict[str, Any] | None:
        reply = await api.request("GET", f"/runs/{run['id']}/logs?node=sweep&item=1")
        return reply.body if reply.status == 200 and reply.body["lines"] else None

    live = await poll_async(live_line, timeout=30, what="item 1's first line, live")
    assert (live["item"], live["source"], live["lines"]) == (1, "live", ["item 1 starts"])
    whole = await api.request("GET", f"/runs/{run['id']}/logs?node=sweep")
    assert whole.status == 422 and "is an array: name one of its items" in whole.body["detail"]
    gate.write_text("open")
    assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    printed = await _cli(api, "runs", "logs", run["id"], "--node", "sweep", "--item", "2")
    assert printed.exit_code == 0, printed.output
    # (The engine in this process logs to the same captured stdout: its lines are apart.)
    said = [line for line in printed.output.splitlines() if line.startswith("item ")]
    assert said == ["item 2 starts", "item 2 ends"]
    every = await _cli(api, "runs", "logs", run["id"])
    assert "an array: each item's output is its own" in every.output
    missing = await api.request("GET", f"/runs/{run['id']}/logs?node=sweep&item=3")
    assert missing.status == 404


async def test_a_run_with_no_array_says_so_when_asked_for_items(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    await api.put_flow("plain", [{"id": "n", "code": "def process():\n    return 1\n"}])
    run = await api.wait_run((await api.start_run("plain"))["id"])
    page = await api.request("GET", f"/runs/{run['id']}/items")
    assert page.status == 404 and "has no array node" in page.body["detail"]
    chosen = {"items": [0]}
    cancel = await api.request("POST", f"/runs/{run['id']}/items/cancel", json_body=chosen)
    assert cancel.status == 404 and "has no array node" in cancel.body["detail"]
    bad = await api.request("POST", f"/runs/{run['id']}/items/cancel", json_body={"items": []})
    assert bad.status == 422 and "items" in bad.body["detail"]


async def test_bad_items_are_refused_with_the_field_the_line_and_the_limit(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    data = b'{"x": 1}\n[2]\n'
    digest = (await api.request("PUT", "/artifacts", data=data)).body["digest"]
    node = {"id": "sweep", "code": SQUARE, "items_from": [digest]}
    bad_line = await api.put_flow("bad", [node])
    assert bad_line.status == 422
    assert "nodes.0.items_from.0" in bad_line.body["detail"]
    assert "line 2 is not a JSON object" in bad_line.body["detail"]
    missing = {**node, "items_from": ["sha256:" + "0" * 64]}
    absent = await api.put_flow("absent", [missing])
    assert absent.status == 422 and "upload it (PUT /artifacts)" in absent.body["detail"]
    many = {"id": "sweep", "code": SQUARE, "items": [{}] * 10_001}
    over = await api.put_flow("many", [many])
    assert over.status == 422
    assert "over the 10,000 a flow may hold" in over.body["detail"]
    assert '"items_from"' in over.body["detail"]
    assert (await api.request("GET", "/flows/bad")).status == 404, "nothing kept"
