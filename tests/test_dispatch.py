"""The scheduling loop's owner, in the test's process: workers, calls and provisioning.

The engine is ``create_app`` behind pytest-aiohttp; its workers are scripted ends of real
attach sockets (:class:`~tests.support.inprocess.ScriptedWorker`), and its provisioner's
outside system is a dict on a clock the test advances. So every ordering (a worker gone
mid-call, a job that never starts, a worker that attaches with a request's token) is
produced on demand and asserted as a user sees it through the API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from fluksio.agent.protocol.frames import PROTOCOL, ProgressFrame, encode
from fluksio.engine.worker_tokens import WorkerTokenStore
from tests.support.inprocess import (
    ClientFactory,
    InProcessEngine,
    attach_cpu,
    start_in_process,
)
from tests.support.runs import nodes_of
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"


async def test_a_call_waits_for_its_label_then_runs_on_the_worker_that_attaches(
    api: InProcessEngine,
) -> None:
    node = {"id": "train", "code": NODE, "worker": "gpu", "resources": {"gpus": 1}}
    await api.put_flow("gpu", [node])
    run = await api.start_run("gpu")
    assert run["reason"] == "no attached worker carries label 'gpu'"
    worker = await api.attach(
        await api.mint("gpu-box", ["gpu"]), name="gpu-box", labels=["gpu"], gpus=2, cpus=8
    )
    assert worker.greeting["op"] == "welcome" and worker.greeting["protocol"] == PROTOCOL
    call = await worker.next_call()
    assert call["op"] == "run" and call["node"] == "train" and call["run"] == {"id": run["id"]}
    # One GPU of two; the cores' fair share of its one slot: all 8.
    assert call["env"]["CUDA_VISIBLE_DEVICES"] == "0" and call["threads"] == 8
    resources = (await api.request("GET", "/workers/resources")).body
    (place,) = [p for p in resources["places"] if p["name"] == "gpu-box"]
    assert place["free"]["gpus"] == 1 and resources["labels"]["gpu"]["workers"] == 1
    await worker.emit(call["call_id"], {"step": 1})
    await worker.answer(call["call_id"], {"loss": 0.5})
    done = nodes_of(await api.wait_run(run["id"]))["train"]
    assert (done["state"], done["ran_on"], done["result"]) == (
        "succeeded",
        "gpu-box",
        {"loss": 0.5},
    )
    assert [e["outputs"] for e in done["events"]] == [{"step": 1}]


async def test_a_worker_gone_mid_call_fails_the_call_and_leaves_the_scheduler(
    api: InProcessEngine,
) -> None:
    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    worker = await attach_cpu(api, "box")
    run = await api.start_run("cpu")
    await worker.next_call()
    await worker.close()
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert node["state"] == "failed" and node["error"]["type"] == "WorkerGone"
    assert "went away mid-call" in node["error"]["message"]

    async def gone() -> bool:
        places = (await api.request("GET", "/workers/resources")).body["places"]
        return [p["name"] for p in places] == ["engine"]

    await poll_async(gone, timeout=5, what="the worker to leave the places")
    again = await api.start_run("cpu")
    assert again["reason"] == "no attached worker carries label 'cpu'"


async def test_unsigned_labels_and_another_protocol_are_refused_saying_what_to_do(
    api: InProcessEngine,
) -> None:
    token = await api.mint("box", ["cpu"])
    greedy = await api.attach(token, name="box", labels=["cpu", "gpu"])
    assert greedy.greeting["op"] == "refused"
    assert "labels gpu are not signed by this worker's token" in greedy.greeting["reason"]
    old = await api.attach(token, name="old", protocol=1)
    assert old.greeting["op"] == "refused" and "upgrade" in old.greeting["reason"]
    listed = (await api.request("GET", "/workers")).body
    assert [(w["name"], w["status"]) for w in listed] == [("box/old", "needs upgrade")]


async def test_retries_run_a_call_again_when_its_worker_is_lost_and_keep_one_result(
    api: InProcessEngine,
) -> None:
    nodes: list[dict[str, Any]] = [
        {"id": "twice", "code": NODE, "worker": "cpu", "retries": 1},
        {"id": "once", "code": NODE, "worker": "gpu"},
    ]
    await api.put_flow("lossy", nodes)
    first = await api.attach(
        await api.mint("first", ["cpu", "gpu"]), name="first", labels=["cpu", "gpu"], parallel=2
    )
    run = await api.start_run("lossy")
    await async_wait_for(lambda: len(first.calls) == 2, timeout=5, what="both calls to start")
    assert {c["node"] for c in first.calls.values()} == {"twice", "once"}
    lost_call = next(c for c in first.calls.values() if c["node"] == "twice")
    await first.close()  # the host dies with both calls on it

    second = await attach_cpu(api, "second")
    again = await second.next_call()
    assert again["node"] == "twice" and again["call_id"] != lost_call["call_id"]
    await second.answer(again["call_id"], "second time lucky")
    done = nodes_of(await api.wait_run(run["id"]))
    assert (done["twice"]["state"], done["twice"]["result"]) == ("succeeded", "second time lucky")
    assert done["twice"]["ran_on"] == "second"
    assert [e["event"] for e in done["twice"]["events"]] == ["retried"]
    assert done["once"]["state"] == "failed", "no retries: lost is failed, as before"
    assert done["once"]["error"]["type"] == "WorkerGone"


@pytest.mark.parametrize(
    ("protocol", "says"),
    [
        (1, "this worker speaks protocol 1: upgrade it with 'pip install -U fluksio-worker'"),
        (3, "this worker speaks protocol 3, newer than this engine's 2: upgrade the engine"),
        (2.0, "the hello's protocol must be a whole number (this engine speaks 2); it was 2.0"),
        ("2", "the hello's protocol must be a whole number (this engine speaks 2); it was '2'"),
    ],
)
async def test_a_protocol_other_than_2_is_told_which_side_to_upgrade(
    api: InProcessEngine, protocol: Any, says: str
) -> None:
    worker = await api.attach(await api.mint("box", []), name="box", protocol=protocol)
    assert worker.greeting["op"] == "refused" and says in worker.greeting["reason"]
    (listed,) = (await api.request("GET", "/workers")).body
    assert listed["status"] == "needs upgrade" and says in listed["reason"]
    if isinstance(protocol, int):
        assert listed["protocol"] == protocol


async def test_what_refused_hellos_make_the_engine_keep_is_bounded(api: InProcessEngine) -> None:
    token = await api.mint("box", [])

    async def refused(hello: dict[str, Any]) -> str:
        socket = await api.client.ws_connect(
            "/api/v1/workers/attach", headers={"Authorization": f"Bearer {token}"}
        )
        await socket.send_str(json.dumps({"op": "hello", **hello}))
        greeting = json.loads((await socket.receive(timeout=5)).data)
        await socket.close()
        assert greeting["op"] == "refused"
        return str(greeting["reason"])

    for index in range(40):
        await refused({"protocol": 1, "name": f"host-{index}", "version": "9" * 1000})
    odd = await refused({"protocol": "2" * 5000, "name": "x" * 5000})
    assert len(odd) < 200, "the refusal quotes a bounded part of what was sent"
    # Over the bound on frames that are not answers: refused before it is read further.
    huge = await refused({"protocol": 2, "name": "box", "padding": "x" * (2 << 20)})
    assert huge.startswith("a hello of ") and len(huge) < 200, huge
    listed = (await api.request("GET", "/workers")).body
    assert len(listed) == 8, "at most 8 refused workers per token, the latest"
    # The latest 8; a name outside the name rule is kept as the token's name.
    assert {w["name"] for w in listed} == {"box"} | {f"box/host-{i}" for i in range(33, 40)}
    assert max(len(w["version"] or "") for w in listed) <= 32
    assert all(w["protocol"] in (1, None) for w in listed)
    assert len(json.dumps(listed)) < 8 * 1024
    auth = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get("/metrics", headers=auth) as scraped:
        series = [
            line for line in (await scraped.text()).splitlines()
            if line.startswith("fluksio_workers_refused{")
        ]  # fmt: skip
    assert series == [
        'fluksio_workers_refused{version="other"} 7.0',
        'fluksio_workers_refused{version="unknown"} 1.0',
    ], "label values from a bounded set, never what a hello sent"


async def test_a_result_over_the_frame_limit_fails_its_call_naming_the_size(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", max_frame_bytes=1 << 20)
    await api.put_flow("big", [{"id": "n", "code": NODE, "worker": "cpu", "retries": 2}])
    worker = await attach_cpu(api, "box")
    run = await api.start_run("big")
    call = await worker.next_call()
    await worker.answer(call["call_id"], "x" * (2 << 20))
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert node["state"] == "failed", node
    assert node["error"]["type"] == "FrameTooLarge", "not a lost worker: never retried"
    assert "larger than the engine's --max-frame-bytes (1048576 bytes)" in node["error"]["message"]
    await async_wait_for(lambda: worker.socket.closed, timeout=5, what="the socket to close")
    assert worker.socket.close_code == 1009


async def test_a_large_answer_no_call_waits_for_is_dropped_unread(api: InProcessEngine) -> None:
    worker = await attach_cpu(api, "box")
    (session,) = api.engine.workers.attached()
    # Unread: not even parsed (this one would not parse: it is cut off), so it costs
    # the engine its bytes once, not a parse's twice more.
    await worker.socket.send_str(
        '{"call_id": "never-sent", "ok": true, "result": "' + "x" * (8 << 20)
    )
    await async_wait_for(lambda: session.machine.unknown_frames == 1, timeout=10, what="the drop")
    # Passed over as it arrived: aiohttp's reader never held it whole; a smaller one
    # (under 1 MiB, over 64 KiB) too.
    assert api.engine.workers.frames.passed_over == 1
    await worker.socket.send_str(
        '{"call_id": "never-sent", "ok": true, "result": "' + "x" * (512 << 10)
    )
    await async_wait_for(lambda: session.machine.unknown_frames == 2, timeout=10, what="the drop")
    assert api.engine.workers.frames.passed_over == 2
    # The socket goes on: the same worker still takes and answers a call.
    await api.put_flow("after", [{"id": "n", "code": NODE, "worker": "cpu"}])
    run = await api.start_run("after")
    call = await worker.next_call()
    await worker.answer(call["call_id"], "still here")
    assert nodes_of(await api.wait_run(run["id"]))["n"]["result"] == "still here"
    assert not worker.socket.closed


async def test_a_second_attach_of_the_same_worker_supersedes_the_first(
    api: InProcessEngine,
) -> None:
    token = await api.mint("box", [])
    first = await api.attach(token, name="box")
    second = await api.attach(token, name="box")
    assert second.greeting["op"] == "welcome"
    await async_wait_for(lambda: first.socket.closed, timeout=5, what="the first to be closed")
    assert first.socket.close_code == 4409
    listed = (await api.request("GET", "/workers")).body
    assert [w["name"] for w in listed] == ["box"]


async def test_a_page_elsewhere_cannot_open_the_attach_socket(api: InProcessEngine) -> None:
    token = await api.mint("box", [])
    headers = {"Authorization": f"Bearer {token}", "Origin": "https://evil.example"}
    async with api.client.get("/api/v1/workers/attach", headers=headers) as refused:
        assert refused.status == 403
        assert "a page at https://evil.example may not open" in (await refused.json())["detail"]
    own = f"http://{api.client.server.host}:{api.client.server.port}"
    same = await api.client.ws_connect(
        "/api/v1/workers/attach", headers={"Authorization": f"Bearer {token}", "Origin": own}
    )
    await same.close()


async def test_an_answer_for_a_call_not_sent_to_that_worker_changes_nothing(
    api: InProcessEngine,
) -> None:
    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    honest = await attach_cpu(api, "honest")
    forger = await attach_cpu(api, "forger")
    run = await api.start_run("cpu")
    await async_wait_for(
        lambda: honest.calls or forger.calls, timeout=5, what="the call to be sent"
    )
    victim, other = (honest, forger) if honest.calls else (forger, honest)
    call = await victim.next_call()
    with structlog.testing.capture_logs() as logged:
        await other.answer(call["call_id"], "forged")
        await victim.emit(call["call_id"], {"alive": True})
        await async_wait_for(
            lambda: any(e["event"] == "worker.unknown_call" for e in logged),
            timeout=5,
            what="the forged answer to be logged",
        )
    (warning,) = [e for e in logged if e["event"] == "worker.unknown_call"]
    assert warning["worker"] == other.greeting["name"] and warning["call_id"] == call["call_id"]
    assert (await api.run(run["id"]))["state"] == "running", "the forged answer ended nothing"
    await victim.answer(call["call_id"], "real")
    assert nodes_of(await api.wait_run(run["id"]))["n"]["result"] == "real"


async def test_a_worker_that_floods_is_disconnected_saying_why_and_others_carry_on(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(
        aiohttp_client, tmp_path / "data", worker_frames_per_s=100, worker_frame_burst=200
    )
    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    flooder = await api.attach(await api.mint("flood", []), name="flood")
    steady = await attach_cpu(api, "steady")
    heartbeat = encode(ProgressFrame(call_id="nothing", event="heartbeat"))
    for _ in range(1000):
        if flooder.socket.closed:
            break
        await flooder.send_raw(heartbeat)
    await async_wait_for(lambda: flooder.socket.closed, timeout=5, what="the flood to be cut")
    assert flooder.socket.close_code == 1008
    run = await api.start_run("cpu")
    call = await steady.next_call()
    await steady.answer(call["call_id"], "fine")
    assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    assert [w["name"] for w in (await api.request("GET", "/workers")).body] == ["steady"]


DEEP = "[" * 100_000 + "]" * 100_000


async def test_deeply_nested_json_is_refused_and_the_engine_keeps_serving(
    api: InProcessEngine,
) -> None:
    headers = {"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"}
    async with api.client.put("/api/v1/flows/deep", data=DEEP, headers=headers) as answer:
        assert answer.status == 422
        assert await answer.json() == {"detail": "body: is nested too deeply", "field": "body"}
    worker = await api.attach(await api.mint("box", []), name="box")
    await worker.send_raw(DEEP)
    await async_wait_for(lambda: worker.socket.closed, timeout=5, what="the socket to close")
    assert worker.socket.close_code == 1007
    assert (await api.request("GET", "/health")).status == 200


async def test_a_text_frame_that_is_not_utf8_closes_the_socket_with_1007(
    api: InProcessEngine,
) -> None:
    # The engine hands frames to the JSON parser as bytes; the parser checks UTF-8.
    worker = await api.attach(await api.mint("box", []), name="box")
    frame = b'{"op": "event", "call_id": "c\xff", "event": "log", "ts": 1.0}'
    await worker.socket.send_frame(frame, aiohttp.WSMsgType.TEXT)
    await async_wait_for(lambda: worker.socket.closed, timeout=5, what="the socket to close")
    assert worker.socket.close_code == 1007


async def test_a_token_revoked_or_lost_behind_the_engines_back_cuts_only_its_workers(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", worker_check_s=0.05)
    tokens = {name: await api.mint(name, ["cpu"]) for name in ("kept", "revoked", "lost")}
    workers = {
        name: await api.attach(token, name=name, labels=["cpu"]) for name, token in tokens.items()
    }
    jtis = {w["name"]: w["token"]["jti"] for w in (await api.request("GET", "/workers")).body}
    # As another process would (``fluksio`` commands share the database): no API call, so
    # nothing disconnects at once and only the watcher can notice.
    store = WorkerTokenStore(api.database)
    store.revoke(jtis["revoked"], "revoked elsewhere")
    api.database.execute("DELETE FROM worker_tokens WHERE jti = ?", (jtis["lost"],))

    def names() -> list[str] | None:
        closed = {name for name, worker in workers.items() if worker.socket.closed}
        return sorted(closed) if closed == {"revoked", "lost"} else None

    await async_wait_for(names, timeout=10, what="the two workers to be cut off")
    listed = (await api.request("GET", "/workers")).body
    assert [w["name"] for w in listed] == ["kept"]
