"""A restarted engine gives a call back only to the worker that holds it (issue 64, items 1
and 2): two workers of one name (as every job of one Slurm profile is), and hostile workers
that name a call they never ran, driven frame by frame. The engine is stopped as an upgrade
stops it and a second one starts on the same data directory, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog

from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.scripted_worker import ScriptedWorker
from tests.support.wait import async_wait_for

NODE = "def process():\n    return 1\n"
NAME = "hpc-small"


async def _two_of_one_name_over_a_restart(
    aiohttp_client: ClientFactory, data: Path
) -> tuple[InProcessEngine, list[tuple[str, str, str]]]:
    """Two workers named ``hpc-small`` on tokens of their own, each running one call of its
    own run; then the engine restarted. The second engine, and (token, run id, call id)
    for each worker."""
    first = await start_in_process(aiohttp_client, data)
    await first.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    held = []
    for instance in ("a", "b"):
        token = await first.mint(NAME, ["cpu"])
        worker = await first.attach(token, name=NAME, labels=["cpu"], instance=instance)
        run = await first.start_run("cpu")
        call = await worker.next_call()
        held.append((token, run["id"], call["call_id"]))
    await first.client.close()
    return await start_in_process(aiohttp_client, data), held


async def _state(api: InProcessEngine, run_id: str) -> dict[str, Any]:
    return nodes_of((await api.request("GET", f"/runs/{run_id}")).body)["n"]


async def test_two_workers_of_one_name_each_get_back_their_own_call_and_it_runs_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Before, the first back named only its own call, and the other's (same name, not
    # named) went back in line while its worker still ran it: it started twice.
    (
        api,
        [(token_a, run_a, call_a), (token_b, run_b, call_b)],
    ) = await _two_of_one_name_over_a_restart(aiohttp_client, tmp_path / "d")
    a = await api.attach(token_a, name=NAME, labels=["cpu"], instance="a", resume=[call_a])
    assert a.greeting["kept"] == [call_a]
    other = await _state(api, run_b)
    assert (other["state"], other["events"]) == ("running", []), "b's call awaits b"
    assert a.calls == {}, "nothing of b's was sent again"
    b = await api.attach(token_b, name=NAME, labels=["cpu"], instance="b", resume=[call_b])
    assert b.greeting["kept"] == [call_b]
    await a.answer(call_a, "a's")
    await b.answer(call_b, "b's")
    for run_id, said in ((run_a, "a's"), (run_b, "b's")):
        ended = nodes_of(await api.wait_run(run_id))["n"]
        assert (ended["state"], ended["result"], ended["attempt"]) == ("succeeded", said, 1)
        assert [event["event"] for event in ended["events"]] == ["adopted"]


async def _refused_its_claim(
    api: InProcessEngine, claimant: ScriptedWorker, run_id: str, call_id: str
) -> None:
    """``claimant`` named the victim's call: it was not kept for it, its answer for it
    changes nothing, and the call still waits for its own worker."""
    assert claimant.greeting["op"] == "welcome", claimant.greeting
    assert claimant.greeting["kept"] == []
    with structlog.testing.capture_logs() as logged:
        await claimant.answer(call_id, "forged")
        await async_wait_for(
            lambda: any(e["event"] == "worker.unknown_call" for e in logged),
            timeout=5,
            what="the forged answer to be read and refused",
        )
    node = await _state(api, run_id)
    assert (node["state"], node["result"], node["events"]) == ("running", None, []), node
    assert claimant.calls == {}


async def test_a_worker_naming_a_call_it_never_ran_gets_nothing_and_the_call_waits_for_its_own(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, [(victim_token, run_id, call_id), _] = await _two_of_one_name_over_a_restart(
        aiohttp_client, tmp_path / "d"
    )
    # Another token of the victim's name, the victim's token under another name, and
    # another token of another name: each names the victim's call first.
    others = [
        (await api.mint(NAME, ["cpu"]), NAME),
        (victim_token, "thief"),
        (await api.mint("thief", ["cpu"]), "thief"),
    ]
    for token, name in others:
        claimant = await api.attach(token, name=name, labels=["cpu"], resume=[call_id])
        await _refused_its_claim(api, claimant, run_id, call_id)
    victim = await api.attach(
        victim_token, name=NAME, labels=["cpu"], instance="a", resume=[call_id]
    )
    assert victim.greeting["kept"] == [call_id]
    await victim.answer(call_id, "the real one")
    ended = nodes_of(await api.wait_run(run_id))["n"]
    assert (ended["state"], ended["result"], ended["attempt"]) == ("succeeded", "the real one", 1)


async def test_the_same_worker_started_again_ends_its_old_call_at_once_as_worker_gone(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, [(token, run_id, call_id), _] = await _two_of_one_name_over_a_restart(
        aiohttp_client, tmp_path / "d"
    )
    # Its token and name, another process: whatever it names, the call died with the old.
    again = await api.attach(token, name=NAME, labels=["cpu"], instance="a2", resume=[call_id])
    assert again.greeting["kept"] == []
    ended = nodes_of(await api.wait_run(run_id))["n"]
    assert ended["error"]["type"] == "WorkerGone", ended
    assert "was started again while the engine was away" in ended["error"]["message"]
    await async_wait_for(lambda: again.cancelled == [call_id], timeout=5, what="told to drop it")


ITEM = "def process(x):\n    return x\n"


async def _items_over_a_restart(
    aiohttp_client: ClientFactory, data: Path, **node: Any
) -> tuple[InProcessEngine, str, str, dict[int, str]]:
    """An array of three items, all running on one worker (named box, three slots), then
    the engine restarted: the second engine, the worker's token, the run, and each item's
    call id by its position."""
    first = await start_in_process(aiohttp_client, data)
    array = {"id": "n", "code": ITEM, "worker": "cpu", "items": [{"x": x} for x in range(3)]}
    await first.put_flow("sweep", [{**array, **node}])
    token = await first.mint("box", ["cpu"])
    worker = await first.attach(token, name="box", labels=["cpu"], parallel=3, instance="a")
    run = await first.start_run("sweep")
    await async_wait_for(lambda: len(worker.calls) == 3, timeout=5, what="the three items")
    calls = {frame["kwargs"]["x"]: call_id for call_id, frame in worker.calls.items()}
    await first.client.close()
    return await start_in_process(aiohttp_client, data), token, run["id"], calls


async def test_an_arrays_items_on_a_worker_are_adopted_and_one_it_does_not_name_runs_again(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, token, run_id, calls = await _items_over_a_restart(aiohttp_client, tmp_path / "d")
    back = [calls[0], calls[1]]
    worker = await api.attach(
        token, name="box", labels=["cpu"], parallel=3, instance="a", resume=back
    )
    assert sorted(worker.greeting["kept"]) == sorted(back)
    again = await worker.next_call()  # item 2's run frame never reached it: sent again
    assert again["kwargs"] == {"x": 2} and again["call_id"] != calls[2]
    for call_id, result in ((calls[0], 0), (calls[1], 1), (again["call_id"], 2)):
        await worker.answer(call_id, result)
    assert (await api.wait_run(run_id))["state"] == "succeeded"
    items = (await api.request("GET", f"/runs/{run_id}/items")).body["items"]
    assert [(i["result"], i["attempt"]) for i in items] == [(0, 1), (1, 1), (2, 1)]


async def test_an_item_whose_worker_was_started_again_runs_again_with_retry_on_restart(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, token, run_id, calls = await _items_over_a_restart(
        aiohttp_client, tmp_path / "d", retry_on_restart=True
    )
    worker = await api.attach(token, name="box", labels=["cpu"], parallel=3, instance="a2")
    await async_wait_for(lambda: len(worker.calls) == 3, timeout=5, what="three sent again")
    sent = list(worker.calls.values())
    assert {frame["call_id"] for frame in sent}.isdisjoint(calls.values())
    for frame in sent:
        await worker.answer(frame["call_id"], frame["kwargs"]["x"])
    assert (await api.wait_run(run_id))["state"] == "succeeded"
    items = (await api.request("GET", f"/runs/{run_id}/items")).body["items"]
    assert [(i["result"], i["attempt"]) for i in items] == [(0, 2), (1, 2), (2, 2)]
