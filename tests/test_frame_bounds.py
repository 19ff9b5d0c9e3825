"""Only a call's answer may be a large frame: every other frame a worker sends (a hello, an
event, output lines) is at most ``CONTROL_FRAME_BYTES`` (1 MiB).

A larger event fails its call as ``FrameTooLarge`` (the worker and its other calls go on);
a larger hello is refused. Our agent refuses such an event where the node emits it, with
a sentence the node's author reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import CONTROL_FRAME_BYTES, ProgressFrame, encode
from fluksio.agent.runner.protocol import EVENT_MAX_BYTES
from tests.support.engine import start_engine
from tests.support.inprocess import InProcessEngine
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.scripted_worker import hello_frame
from tests.support.wait import async_wait_for
from tests.support.worker import start_worker

NODE = "def process():\n    return 1\n"


def test_an_event_our_agent_sends_fits_the_bound_with_its_frame_around_it() -> None:
    assert CONTROL_FRAME_BYTES - EVENT_MAX_BYTES >= 1024


async def test_an_event_over_the_bound_fails_its_call_and_the_worker_goes_on(
    api: InProcessEngine,
) -> None:
    # The published agent checks nothing: its node emitted 2 MiB.
    await api.put_flow("f", [{"id": "n", "code": NODE, "worker": "cpu"}])
    worker = await api.attach(await api.mint("box", ["cpu"]), name="box", labels=["cpu"])
    run = await api.start_run("f")
    call = (await worker.next_call())["call_id"]
    frame = encode(ProgressFrame(call_id=call, event="emit", outputs={"big": "x" * (2 << 20)}))
    await worker.send_raw(frame)
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert node["error"]["type"] == "FrameTooLarge", node
    assert api.engine.workers.frames.passed_over == 1, "judged as it arrived, never held"
    assert node["error"]["message"] == (
        f"the call's emit frame was {len(frame.encode())} bytes; frames other than its answer"
        f" are at most {CONTROL_FRAME_BYTES} bytes: save large data as an artifact"
    )
    await async_wait_for(lambda: worker.cancelled == [call], timeout=5, what="the cancel")
    await worker.answer(call, ok=False)  # as it ends after the cancel: a late answer, dropped
    # The socket goes on: the same worker takes the next call, and a large answer too.
    again = await api.start_run("f")
    second = (await worker.next_call())["call_id"]
    await worker.answer(second, "y" * (2 << 20))
    answered = nodes_of(await api.wait_run(again["id"], timeout=60))["n"]
    assert answered["result"] == "y" * (2 << 20), answered["error"]
    assert not worker.socket.closed


async def test_a_large_frame_naming_no_call_closes_the_socket_unread(
    api: InProcessEngine,
) -> None:
    await api.put_flow("f", [{"id": "n", "code": NODE, "worker": "cpu"}])
    worker = await api.attach(await api.mint("box", ["cpu"]), name="box", labels=["cpu"])
    run = await api.start_run("f")
    await worker.next_call()
    frame = json.dumps({"padding": "x" * (2 << 20)})
    await worker.send_raw(frame)
    await async_wait_for(lambda: worker.socket.closed, timeout=10, what="the socket to close")
    assert worker.socket.close_code == 1009
    assert api.engine.workers.frames.passed_over == 1
    node = nodes_of(await api.wait_run(run["id"]))["n"]
    assert node["error"]["message"] == (
        f"a frame of {len(frame)} bytes that names no call; frames other than a call's answer"
        f" are at most {CONTROL_FRAME_BYTES} bytes"
    ), node


async def test_a_hello_over_the_bound_is_refused(api: InProcessEngine) -> None:
    token = await api.mint("box", [])
    socket = await api.ws_connect("/workers/attach", headers={"Authorization": f"Bearer {token}"})
    hello = json.loads(hello_frame("box", []))
    hello["padding"] = "x" * CONTROL_FRAME_BYTES  # an unknown key: ignored, but counted
    await socket.send_str(json.dumps(hello))
    refused = json.loads((await socket.receive(timeout=5)).data)
    assert refused["op"] == "refused"
    assert (
        refused["reason"].startswith("a hello of ") and "at most 1048576 bytes" in refused["reason"]
    ), refused
    await socket.close()


@pytest.mark.process
def test_our_agent_refuses_a_large_event_where_the_node_emits_it(tmp_path: Path) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    worker = None
    try:
        admin = engine.login()
        token = engine.mint(admin, "box", ["box"])["token"]
        worker = start_worker(engine, token, tmp_path / "worker", "--labels", "box")
        node = code("""
            import fluksio
            def process():
                fluksio.emit(small=1)
                try:
                    fluksio.emit(big="x" * (2 << 20))
                except ValueError as refused:
                    return str(refused)
        """)
        run = wait_run(
            engine,
            admin,
            run_flow(engine, admin, "f", [{"id": "n", "worker": "box", "code": node}]),
        )
        done = nodes_of(run)["n"]
        assert done["state"] == "succeeded", done
        assert done["result"].startswith(
            f"fluksio.emit: an event is at most {EVENT_MAX_BYTES} bytes as JSON and this one is"
        ), done["result"]
        assert [e["outputs"] for e in done["events"]] == [{"small": 1}]
    finally:
        if worker is not None:
            worker.stop()
        engine.stop()
