"""An array item's size is bounded, and so is what an array's line holds (issue 65, item
6): a run naming an item over the engine's ``--max-item-bytes`` is refused with the limit,
the setting and the remedy; an array of large items puts only as many in line as
16 MiB holds, where before it held a thousand whatever their size (226 MiB a run)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fluksio.engine.runs.items import LINE_BYTES
from tests.support.inprocess import ClientFactory, start_in_process
from tests.support.scrape import scrape
from tests.support.wait import poll_async

NODE = "def process(x, pad):\n    return x\n"


async def test_an_item_over_the_bound_is_refused_naming_the_setting_and_the_remedy(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "d", max_item_bytes=4096)
    lines = [json.dumps({"x": 1, "pad": ""}), json.dumps({"x": 2, "pad": "p" * 5000})]
    digest = (await api.request("PUT", "/artifacts", data="\n".join(lines) + "\n")).body["digest"]
    refused = await api.put_flow("big", [{"id": "a", "code": NODE, "items_from": [digest]}])
    assert refused.status == 422, refused.body
    detail = refused.body["detail"]
    assert detail.startswith("nodes.0.items_from.0: line 2 is over the 4,096 bytes an item")
    assert "--max-item-bytes" in detail and "save large data as an artifact" in detail
    inline = [{"x": 1, "pad": "p" * 5000}]
    refused = await api.put_flow("inline", [{"id": "a", "code": NODE, "items": inline}])
    assert refused.status == 422 and "nodes.0.items.0: the item is over" in refused.body["detail"]


async def test_an_array_of_large_items_puts_only_what_16_mib_hold_in_line(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "d")
    pad = "p" * 900_000
    data = "".join(json.dumps({"x": x, "pad": pad}) + "\n" for x in range(40)).encode()
    digest = (await api.request("PUT", "/artifacts", data=data)).body["digest"]
    # Bound to a label no worker carries: every item waits in line.
    node = {"id": "a", "code": NODE, "items_from": [digest], "worker": "nowhere"}
    assert (await api.put_flow("large", [node])).status == 201
    await api.start_run("large")
    window = LINE_BYTES // (len(data) // 40)

    async def in_line() -> int | None:
        # What waits for a place, as Prometheus reads it: the items in line.
        _status, metrics = await scrape(api)
        found = re.search(r'fluksio_calls_waiting\{label="nowhere"\} (\d+)', metrics)
        return int(found.group(1)) if found and int(found.group(1)) >= window else None

    assert await poll_async(in_line, timeout=10, what="the items in line") == window == 18
    summary = (await api.request("GET", "/workers/resources")).body["queued"][0]
    assert summary["items"] == 40, "the array still says all 40 wait"
