"""A worker that is stopping (told to stop: a preemption, its job's end) is sent nothing
more (issue 64, item 6): it says so (our agent, to an engine whose welcome takes the
word), or its refusal of a call says it. Driven frame by frame, in this process."""

from __future__ import annotations

from pathlib import Path

from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord, StoppingFrame, encode
from fluksio.agent.protocol.outcome import ErrorKind
from tests.support.inprocess import ClientFactory, InProcessEngine, attach_cpu, start_in_process
from tests.support.wait import poll_async

NODE = "def process():\n    return 1\n"


async def _engine(aiohttp_client: ClientFactory, tmp_path: Path) -> InProcessEngine:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    return api


async def test_a_worker_that_says_it_is_stopping_is_sent_nothing_more(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await _engine(aiohttp_client, tmp_path)
    leaving = await attach_cpu(api, "leaving")
    assert leaving.greeting["stopping"] is True, "the welcome takes the word"
    await leaving.send_raw(encode(StoppingFrame(reason="told to stop (SIGTERM)")))

    async def stopping() -> bool:
        return await api.worker_status("leaving") == "stopping"

    await poll_async(stopping, timeout=5, what="the worker shown as stopping")
    run = await api.start_run("cpu")
    staying = await attach_cpu(api, "staying")
    call = await staying.next_call()
    await staying.answer(call["call_id"], "here")
    assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    assert leaving.calls == {}, "nothing was sent to the worker that is stopping"


async def test_a_worker_that_refuses_a_call_as_stopping_gets_it_once_only(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # An agent of ours that does not say it is stopping (one from before the word) still
    # refuses what it is sent once told to stop: that refusal says it. Before, the call
    # went straight back to it, to be refused again, as fast as the two could talk.
    api = await _engine(aiohttp_client, tmp_path)
    leaving = await attach_cpu(api, "leaving")
    run = await api.start_run("cpu")
    call = await leaving.next_call()
    refused = ErrorRecord(type=ErrorKind.NOT_TAKEN, message="its worker was told to stop")
    await leaving.send_raw(encode(AnswerFrame(call_id=call["call_id"], ok=False, error=refused)))
    staying = await attach_cpu(api, "staying")
    again = await staying.next_call()
    await staying.answer(again["call_id"], "here")
    ended = await api.wait_run(run["id"])
    assert ended["state"] == "succeeded"
    assert list(leaving.calls) == [call["call_id"]], "sent to it once, never again"
    assert await api.worker_status("leaving") == "stopping"
