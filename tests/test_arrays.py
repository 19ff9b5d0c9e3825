"""Arrays: one node, many items, each a call of its own, read by pages.

In the test's process: the engine's own launcher runs the items in real processes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of

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
    for lines in (range(0, 3000), range(3000, 5000)):
        data = "".join(json.dumps({"x": x + 10}) + "\n" for x in lines).encode()
        reply = await api.request("PUT", "/artifacts", data=data)
        assert reply.status in (200, 201), reply.body
        digests.append(reply.body["digest"])
    node = {"id": "sweep", "code": "def process(x):\n    return x\n", "items_from": digests}
    assert (await api.put_flow("many", [node])).status == 201
    run = await api.start_run("many")
    ended = await api.wait_run(run["id"], timeout=120)
    assert ended["state"] == "succeeded", nodes_of(ended)["sweep"]
    assert nodes_of(ended)["sweep"]["array"]["counts"] == {"succeeded": 5000}
    results = []
    after = -1
    while after is not None:
        page = await _items(api, run["id"], f"?after={after}&limit=2000")
        results += [i["result"] for i in page["items"]]
        after = page["next"]
    assert results == [x + 10 for x in range(5000)]
