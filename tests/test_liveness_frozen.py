"""Liveness, in the test's process: the one 90-second rule, on a clock the test moves.

A scripted worker (:class:`~tests.support.inprocess.ScriptedWorker`) takes a call and
freezes: its call fails after ``worker_gone_s`` and not before; a call it never took runs
elsewhere; a pause shorter than the rule loses nothing; a worker that stopped answering
gets no new calls; an idle frozen one is let go.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fluksio.agent.protocol.frames import ProgressFrame, encode
from tests.support.clock import ManualClock
from tests.support.inprocess import (
    ClientFactory,
    InProcessEngine,
    ScriptedWorker,
    attach_cpu,
    cpu_flow_on_a_manual_clock,
    start_in_process,
)
from tests.support.runs import nodes_of
from tests.support.wait import advance_until, async_wait_for


async def _a_frozen_worker_with_a_call(
    api: InProcessEngine,
) -> tuple[ScriptedWorker, dict[str, Any], dict[str, Any]]:
    """Worker box takes a run's call, then freezes: the worker, the run, the call."""
    worker = await attach_cpu(api, "box")
    run = await api.start_run("cpu")
    call = await worker.next_call()
    await _take_then_freeze(api, worker, call["call_id"])
    return worker, run, call


async def _take_then_freeze(api: InProcessEngine, worker: ScriptedWorker, call_id: str) -> None:
    """Take the call as our agent does (a heartbeat at once), then freeze once the engine
    has heard it: the call is the worker's, and then nothing more comes from it."""
    (session,) = [s for s in api.engine.workers.attached() if s.expects(call_id)]
    heard = session.machine.heard
    await worker.send_raw(encode(ProgressFrame(call_id=call_id, event="heartbeat")))
    await async_wait_for(lambda: session.machine.heard > heard, timeout=5, what="the heartbeat")
    await worker.freeze()


async def test_a_frozen_worker_fails_its_call_after_worker_gone_s_and_not_before(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    _worker, run, _call = await _a_frozen_worker_with_a_call(api)
    clock.advance(89)  # the spec's 90 s, less one
    await api.seen_silent("box")
    assert nodes_of(await api.run(run["id"]))["n"]["state"] == "running"
    clock.advance(2)
    node = nodes_of(await api.wait_run(run["id"], timeout=10))["n"]
    assert node["error"]["type"] == "WorkerGone"
    assert node["error"]["message"] == (
        "no message from the worker for 90 s while it was executing; its calls failed as gone"
    )


async def test_a_call_a_frozen_worker_never_took_runs_elsewhere_and_is_dropped_there(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Before, it waited out the 90-s rule and failed, while a healthy worker idled.
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    frozen = await attach_cpu(api, "frozen")
    await frozen.freeze()
    run = await api.start_run("cpu")
    healthy = await attach_cpu(api, "healthy")
    clock.advance(15)  # worker_take_s
    call = await healthy.next_call(timeout=10)
    await healthy.answer(call["call_id"], "ran once, here")
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert (node["state"], node["ran_on"]) == ("succeeded", "healthy")
    assert node["result"] == "ran once, here"
    assert [e["event"] for e in node["events"]] == ["requeued"]
    assert "frozen sent nothing for 15 s" in node["events"][0]["outputs"]["after"]
    # It wakes: it finds the call, and the engine's word to drop it, behind it.
    frozen.thaw()
    await async_wait_for(lambda: frozen.cancelled, timeout=5, what="the cancel to be read")
    (first,) = frozen.calls
    assert frozen.cancelled == [first] and first != call["call_id"]
    await frozen.answer(first, "too late")  # if it ran anyway: ignored, one result kept
    sessions = {s.name: s for s in api.engine.workers.attached()}
    await async_wait_for(
        lambda: sessions["frozen"].machine.unknown_frames == 1, timeout=5, what="the late answer"
    )

    async def answering_again() -> bool:
        return await api.worker_status("frozen") not in ("not answering", None)

    await advance_until(clock, 2, answering_again, timeout=10, what="it to answer again")
    assert nodes_of(await api.run(run["id"]))["n"]["result"] == "ran once, here"


async def test_a_pause_shorter_than_worker_gone_s_loses_nothing(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    worker, run, call = await _a_frozen_worker_with_a_call(api)
    clock.advance(60)  # pings go unanswered, the watch looks, and it is not gone
    await api.seen_silent("box")
    worker.thaw()
    await worker.answer(call["call_id"], "after the pause")
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert (node["state"], node["result"]) == ("succeeded", "after the pause")
    assert not worker.socket.closed


async def test_a_worker_that_stopped_answering_gets_no_new_calls(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    frozen = await attach_cpu(api, "frozen")
    await frozen.freeze()
    clock.advance(30)  # two pings unanswered; gone only at 90 s
    await api.seen_silent("frozen")
    run = await api.start_run("cpu")
    assert run["reason"].startswith(
        "1 worker carries 'cpu'; none has a free slot (frozen: not answering)"
    )
    healthy = await attach_cpu(api, "healthy")
    call = await healthy.next_call()
    await healthy.answer(call["call_id"], "here")
    assert nodes_of(await api.wait_run(run["id"]))["n"]["ran_on"] == "healthy"
    assert frozen.calls == {}, "nothing new was sent to the silent worker"
    frozen.thaw()

    async def answering() -> bool:
        return await api.worker_status("frozen") == "idle"

    await advance_until(clock, 2, answering, timeout=10, what="the thawed worker to answer")


async def test_an_idle_worker_is_seen_alive_and_a_frozen_idle_one_is_let_go(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, tmp_path / "data", clock=clock)
    worker = await api.attach(await api.mint("idle", []), name="idle")

    async def seen_since_attaching() -> bool:
        (listed,) = (await api.request("GET", "/workers")).body
        seen, attached = (datetime.fromisoformat(listed[k]) for k in ("last_seen", "attached_at"))
        return seen > attached

    await advance_until(clock, 5, seen_since_attaching, timeout=10, what="an idle worker's pong")
    await worker.freeze()

    async def let_go() -> bool:
        return bool((await api.request("GET", "/workers")).body == [])

    await advance_until(clock, 10, let_go, timeout=10, what="the frozen idle worker to go")
