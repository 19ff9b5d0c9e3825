"""A node's output while it runs: read from a position, resumed exactly, in the feed too.

In the test's process (the engine behind ``aiohttp_client``, its calls in real processes)
for the endpoint, the window and the feed; the command line against real engine and
worker processes, through a connection the test cuts, in ``tests/test_live_logs_cli.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fluksio.agent.live_output import BURST_BYTES, LiveOutput
from fluksio.agent.protocol.frames import LogFrame, encode
from fluksio.engine.runs.live_logs import LINES_KEPT
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.sse import EventReader
from tests.support.wait import poll_async

SLOW = """
import os, time

def process(gate, token):
    print("first line", flush=True)
    print(f"the token is {token}", flush=True)
    while not os.path.exists(gate):
        time.sleep(0.02)
    print("last line")
    return "done"
"""


async def _logs(api: InProcessEngine, run_id: str, query: str) -> dict[str, Any]:
    answer = await api.request("GET", f"/runs/{run_id}/logs?{query}")
    assert answer.status == 200, answer.body
    body: dict[str, Any] = answer.body
    return body


async def test_a_running_nodes_lines_are_read_from_a_position_while_it_runs(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    secret = {"value": "hunter2-the-long-one", "labels": []}
    assert (await api.request("PUT", "/secrets/tok", json_body=secret)).status == 200
    gate = tmp_path / "gate"
    params = {"gate": str(gate), "token": {"$secret": "tok"}}
    await api.put_flow("slow", [{"id": "slow", "code": SLOW, "params": params}])
    run_id = (await api.start_run("slow"))["id"]

    async def two_lines() -> dict[str, Any] | None:
        body = await _logs(api, run_id, "from=0&wait=5")
        return body if len(body["lines"]) == 2 else None

    running = await poll_async(two_lines, timeout=20, what="the first two lines")
    assert running["lines"] == ["first line", "the token is [redacted]"]
    assert (running["state"], running["source"], running["ended"]) == ("running", "live", False)
    assert (running["first"], running["next"], running["missed"]) == (0, 2, 0)
    # From where it left off: nothing yet, then the rest, once there is some.
    quiet = await _logs(api, run_id, "from=2&wait=0.2")
    assert (quiet["lines"], quiet["next"], quiet["ended"]) == ([], 2, False)
    waiting = asyncio.ensure_future(_logs(api, run_id, "from=2&wait=20"))
    gate.touch()  # whether the request is held yet or not, it answers with the line
    rest = await asyncio.wait_for(waiting, 25)
    assert rest["lines"] == ["last line"] and rest["first"] == 2
    run = await api.wait_run(run_id)
    assert run["state"] == "succeeded"
    ended = await _logs(api, run_id, "from=3&wait=5")
    assert (ended["lines"], ended["ended"], ended["state"]) == ([], True, "succeeded")
    # The stored record holds the same output, secrets blanked the same way.
    assert run["nodes"][0]["logs"] == "first line\nthe token is [redacted]\nlast line\n"
    # An attempt it never had is refused, naming the field and the bound.
    refused = await api.request("GET", f"/runs/{run_id}/logs?attempt=2")
    assert (refused.status, refused.body["detail"]) == (
        422,
        "attempt: must be a number from 1 to 1",
    )


async def test_a_worker_sends_lines_as_frames_and_a_gap_is_counted_not_hidden(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    worker = await api.attach(await api.mint("box", ["cpu"]), name="box", labels=["cpu"])
    assert worker.greeting["logs"] is True, "the engine offers to take lines"
    node = {"id": "n", "code": "def process():\n    return 1\n", "worker": "cpu"}
    await api.put_flow("far", [node])
    run_id = (await api.start_run("far"))["id"]
    call = await worker.next_call()
    await worker.send_raw(encode(LogFrame(call_id=call["call_id"], first=0, lines=["a", "b"])))
    # Lines 2 to 4 never came (the agent's rate bound): the next batch starts at 5.
    await worker.send_raw(encode(LogFrame(call_id=call["call_id"], first=5, lines=["f"])))

    async def six() -> dict[str, Any] | None:
        body = await _logs(api, run_id, "from=0")
        return body if body["next"] == 6 else None

    body = await poll_async(six, timeout=10, what="both batches")
    assert (body["first"], body["lines"], body["missed"]) == (5, ["f"], 5), body
    resumed = await _logs(api, run_id, "from=1")
    assert (resumed["first"], resumed["lines"], resumed["missed"]) == (5, ["f"], 4)
    await worker.answer(call["call_id"], 1)
    await api.wait_run(run_id)


async def test_the_feed_tells_a_calls_lines_and_a_long_output_is_kept_bounded(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    many = LINES_KEPT + 2_000
    flood = f"def process():\n    for n in range({many}):\n        print(n)\n"
    await api.put_flow("flood", [{"id": "flood", "code": flood}])
    headers = {"Authorization": f"Bearer {api.token}"}
    response = await api.client.get("/api/v1/events", headers=headers)
    events = EventReader(response)
    try:
        await events.first("ready")
        run_id = (await api.start_run("flood"))["id"]
        await api.wait_run(run_id)
        await events.until(
            lambda seen: any(e.kind == "call.log" for e in seen), what="a call.log event"
        )
        logged = [e.data for e in events.events if e.kind == "call.log"]
        assert not events.undeclared, events.undeclared
    finally:
        await events.close()
    assert all(len(d["lines"]) <= 200 for d in logged), "an event carries at most 200 lines"
    last = logged[-1]
    assert last["lines"][-1] == str(many - 1) and last["node"] == "flood"
    # The engine keeps the newest window live; once the call ended, a reader from before
    # that window gets the whole of its record instead of a gap (it was counted, before).
    body = await _logs(api, run_id, "from=0")
    assert (body["source"], body["next"], body["missed"]) == ("stored", many, 0)
    assert body["lines"] == [str(n) for n in range(many)]


async def test_live_output_cuts_batches_numbers_every_line_and_bounds_the_rate() -> None:
    batches: list[tuple[int, list[str]]] = []
    now = [0.0]
    output = LiveOutput(lambda first, lines: batches.append((first, lines)), clock=lambda: now[0])
    output.add(b"one\ntw")
    output.add(b"o\nthree")
    output.flush()
    assert batches == [(0, ["one", "two"])], "an unfinished line waits for its end"
    output.add(b"\n")
    line = b"x" * 1023 + b"\n"
    for _ in range(2 * BURST_BYTES // len(line)):  # twice the burst, at one instant
        output.add(line)
    output.close()
    kept = sum(len(lines) for _first, lines in batches)
    assert output.lines == 3 + 2 * BURST_BYTES // len(line)
    assert kept < output.lines, "a flood beyond the burst is dropped"
    firsts = [first for first, _lines in batches]
    assert firsts == sorted(firsts)
    assert batches[-1] == (output.lines, []), "the end says how many lines there were"
    assert batches[1] == (2, ["three", *["x" * 1023] * (len(batches[1][1]) - 1)])
