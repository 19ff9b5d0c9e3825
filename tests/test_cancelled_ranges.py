"""Items cancelled before they were read are held and stored as ranges (issue 65, item 7):
cancelling most of a large array's unread items writes a few ranges, not a row each,
counts them all, lists them, and a restarted engine still passes over every one."""

from __future__ import annotations

from pathlib import Path

from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of

NODE = "def process(x):\n    return x\n"
ITEMS = 200_000
KEPT = 4_000  # the first ones are left to run


async def _array(api: InProcessEngine) -> str:
    data = "".join(f'{{"x": {x}}}\n' for x in range(ITEMS)).encode()
    digest = (await api.request("PUT", "/artifacts", data=data)).body["digest"]
    node = {"id": "a", "code": NODE, "items_from": [digest], "worker": "nowhere"}
    await api.put_flow("many", [node])
    return str((await api.start_run("many"))["id"])


def _counts(run: dict[str, object]) -> dict[str, int]:
    counts: dict[str, int] = nodes_of(run)["a"]["array"]["counts"]
    return counts


async def test_most_of_a_large_arrays_unread_items_cancelled_are_a_few_ranges(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "d")
    run_id = await _array(api)
    for low in range(KEPT, ITEMS, 10_000):  # as many positions as a request may name
        body = {"items": list(range(low, min(low + 10_000, ITEMS)))}
        done = await api.request("POST", f"/runs/{run_id}/items/cancel", json_body=body)
        assert done.status == 200, done.body
    cancelled = ITEMS - KEPT
    assert _counts(await api.run(run_id)) == {"queued": KEPT, "cancelled": cancelled}
    # Before, a row each: 196,000 rows written, and 75 bytes a position held.
    stored = api.database.execute("SELECT count(*) FROM array_items").fetchone()[0]
    ranges = api.database.execute("SELECT count(*) FROM item_cancels").fetchone()[0]
    assert (stored, ranges) == (0, 20)
    page = (await api.request("GET", f"/runs/{run_id}/items?state=cancelled&limit=3")).body
    assert [item["item"] for item in page["items"]] == [KEPT, KEPT + 1, KEPT + 2]
    first = (await api.request("GET", f"/runs/{run_id}/items?after={KEPT - 2}&limit=2")).body
    assert [i["state"] for i in first["items"]] == ["queued", "cancelled"]
    await api.client.close()

    again = await start_in_process(aiohttp_client, tmp_path / "d")
    assert _counts(await again.run(run_id)) == {"queued": KEPT, "cancelled": cancelled}
