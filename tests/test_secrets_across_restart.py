"""A secret changed or deleted while the engine was down is still blanked in what a call
given it prints (issue 65, item 3): the call keeps the value it was given, and an adopted
call's lines, events and result are redacted with it, as before the restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import LogFrame, encode
from tests.support.inprocess import ClientFactory, start_in_process
from tests.support.runs import nodes_of

OLD = "the-old-value-of-the-secret"
NEW = "the-new-value-of-the-secret"


@pytest.mark.parametrize("change", ["changed", "deleted"])
async def test_an_adopted_call_has_the_value_it_was_given_blanked(
    aiohttp_client: ClientFactory, tmp_path: Path, change: str
) -> None:
    first = await start_in_process(aiohttp_client, tmp_path / "d")
    await first.request("PUT", "/secrets/key", json_body={"value": OLD, "labels": ["cpu"]})
    node = {"id": "n", "code": "def process(key):\n    return key\n", "worker": "cpu"}
    await first.put_flow("uses", [{**node, "params": {"key": {"$secret": "key"}}}])
    token = await first.mint("box", ["cpu"])
    worker = await first.attach(token, name="box", labels=["cpu"], instance="i")
    run = await first.start_run("uses")
    call = await worker.next_call()
    assert call["kwargs"] == {"key": OLD}
    await first.client.close()  # the engine stops; the call runs on

    api = await start_in_process(aiohttp_client, tmp_path / "d")
    if change == "changed":
        changed = await api.request("PUT", "/secrets/key", json_body={"value": NEW, "labels": []})
    else:
        changed = await api.request("DELETE", "/secrets/key")
    assert changed.status in (200, 204), changed.body
    back = await api.attach(
        token, name="box", labels=["cpu"], instance="i", resume=[call["call_id"]]
    )
    assert back.greeting["kept"] == [call["call_id"]]
    lines = [f"the key is {OLD}"] * 3
    await back.send_raw(encode(LogFrame(call_id=call["call_id"], first=0, lines=lines)))
    await back.emit(call["call_id"], {"seen": OLD})
    await back.answer(call["call_id"], {"key": OLD})
    ended = nodes_of(await api.wait_run(run["id"]))["n"]
    shown = repr(ended) + repr((await api.request("GET", f"/runs/{run['id']}/logs")).body)
    assert OLD not in shown, "the value it was given was kept unredacted"
    assert ended["result"] == {"key": "[redacted]"}
    assert "the key is [redacted]" in shown
