"""A restarted engine and the calls it found running on workers, driven frame by frame: a
worker (scripted) comes back naming some, none, or its calls, and the engine adopts,
requeues or ends each, as ``fluksio.engine.dispatch.adoptions`` says. The engine is stopped
as an upgrade stops it (its workers told it is going away) and a second one starts on the
same data directory, in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fluksio.agent.protocol.frames import AnswerFrame, LogFrame, encode
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"


async def _a_call_over_a_restart(
    aiohttp_client: ClientFactory, data: Path
) -> tuple[InProcessEngine, str, dict[str, Any], str]:
    """A run whose call worker ``box`` took, then the engine restarted: the second engine,
    the worker's token, the run, and the call's id."""
    first = await start_in_process(aiohttp_client, data)
    await first.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    token = await first.mint("box", ["cpu"])
    worker = await first.attach(token, name="box", labels=["cpu"])
    run = await first.start_run("cpu")
    call = await worker.next_call()
    await first.client.close()  # stopped, as for an upgrade: the call is left to the next
    second = await start_in_process(aiohttp_client, data)
    return second, token, run, call["call_id"]


async def test_a_worker_naming_its_call_keeps_it_and_its_answer_ends_the_run(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, token, run, call_id = await _a_call_over_a_restart(aiohttp_client, tmp_path / "d")
    worker = await api.attach(token, name="box", labels=["cpu"], resume=[call_id])
    assert worker.cancelled == []
    # Its one slot holds the adopted call: a new run's call waits for it.
    other = await api.start_run("cpu")
    assert worker.calls == {}
    await worker.answer(call_id, "the first engine's call")
    ended = nodes_of(await api.wait_run(run["id"]))["n"]
    assert (ended["state"], ended["result"], ended["attempt"]) == (
        "succeeded",
        "the first engine's call",
        1,
    )
    assert [event["event"] for event in ended["events"]] == ["adopted"]
    second = await worker.next_call()  # its slot free again, the waiting call comes
    await worker.answer(second["call_id"], 2)
    assert (await api.wait_run(other["id"]))["state"] == "succeeded"


async def test_a_call_its_worker_does_not_name_goes_back_in_line_and_runs_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, token, run, call_id = await _a_call_over_a_restart(aiohttp_client, tmp_path / "d")
    worker = await api.attach(token, name="box", labels=["cpu"], resume=[])
    again = await worker.next_call()
    assert again["call_id"] != call_id
    await worker.answer(again["call_id"], 1)
    ended = nodes_of(await api.wait_run(run["id"]))["n"]
    assert (ended["state"], ended["attempt"]) == ("succeeded", 1), "no attempt spent"
    assert [event["event"] for event in ended["events"]] == ["requeued"]


async def test_a_cancel_while_the_call_awaits_its_worker_ends_it_and_the_worker_drops_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, token, run, call_id = await _a_call_over_a_restart(aiohttp_client, tmp_path / "d")
    cancelled = await api.request("POST", f"/runs/{run['id']}/cancel")
    assert cancelled.status in (200, 202), cancelled
    assert (await api.wait_run(run["id"]))["state"] == "cancelled"
    worker = await api.attach(token, name="box", labels=["cpu"], resume=[call_id])
    await async_wait_for(
        lambda: worker.cancelled == [call_id], timeout=5, what="the worker told to drop it"
    )


async def test_an_adopted_calls_lines_read_whole_from_its_record_once_it_ended(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Its first lines went to the engine that died: the restarted engine's live window
    # starts after them. Before, `runs logs` showed "[... 9 lines not kept ...]" even once
    # the call had ended and its record (the answer's output) held all 24.
    data = tmp_path / "d"
    first = await start_in_process(aiohttp_client, data)
    await first.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    token = await first.mint("box", ["cpu"])
    worker = await first.attach(token, name="box", labels=["cpu"])
    run = await first.start_run("cpu")
    call_id = (await worker.next_call())["call_id"]
    lines = [f"line {n}" for n in range(24)]
    await worker.send_raw(encode(LogFrame(call_id=call_id, first=0, lines=lines[:9])))
    await first.client.close()
    api = await start_in_process(aiohttp_client, data)
    back = await api.attach(token, name="box", labels=["cpu"], resume=[call_id])
    await back.send_raw(encode(LogFrame(call_id=call_id, first=9, lines=lines[9:])))
    logs_path = f"/runs/{run['id']}/logs"

    async def heard() -> dict[str, Any] | None:
        body: dict[str, Any] = (await api.request("GET", logs_path)).body
        return body if body["next"] == 24 else None

    running = await poll_async(heard, timeout=5, what="the lines sent after the restart")
    assert (running["missed"], running["lines"]) == (9, lines[9:]), "the gap, said"
    answer = AnswerFrame(call_id=call_id, ok=True, result=1, logs="\n".join(lines) + "\n")
    await back.send_raw(encode(answer))
    await api.wait_run(run["id"])
    ended = (await api.request("GET", logs_path)).body
    assert (ended["missed"], ended["lines"], ended["ended"]) == (0, lines, True), ended
