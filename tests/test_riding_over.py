"""What waits in a client rides over the engine's restart (issue 50, part 3): a script's
``wait_run``, an executor's future and the live feed carry on while the engine is away,
and go on once it is back on the same address; after ``ride_over_s`` they give up in one
sentence. A real engine killed (SIGKILL) and started again on its data directory and port."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from fluksio.client import AsyncClient, Client, Unreachable
from fluksio.wire.answers.runs import RunBody
from tests.support.engine import BIN, free_port, start_engine
from tests.support.wait import wait_for
from tests.support.worker import start_labelled_worker

pytestmark = pytest.mark.process


def square(x: int) -> int:
    return x * x


def test_a_future_a_waiting_script_and_the_feed_carry_on_across_an_engine_restart(
    tmp_path: Path,
) -> None:
    port, data = free_port(), tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1", port=port)
    token = engine.login()
    client = Client(engine.url, token=token, ride_over_s=60)
    executor = client.executor(worker="later")
    future = executor.submit(square, 7)  # no worker is labelled "later" yet: it waits
    waited: list[RunBody] = []
    waiting = threading.Thread(
        target=lambda: waited.append(client.wait_run(future.run_id)), daemon=True
    )
    waiting.start()
    feed = client.events()
    assert next(feed).kind == "ready"
    # Before, each of these raised "cannot reach the engine" within seconds of this kill.
    engine.stop(signal.SIGKILL)
    second = start_engine(data, tmp_path / "logs2", port=port)
    worker = None
    try:
        # The feed opened again says what the engine's restart lost, then goes on.
        assert [next(feed).kind, next(feed).kind] == ["refetch", "ready"]
        worker = start_labelled_worker(second, second.login(), "later", tmp_path / "worker")
        assert future.result(timeout=60) == 49
        waiting.join(timeout=60)
        assert [run.state for run in waited] == ["succeeded"]
    finally:
        executor.shutdown(wait=False)
        if worker is not None:
            worker.stop()
        second.stop()


def test_a_waiting_client_gives_up_after_ride_over_s_in_one_sentence(tmp_path: Path) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    client = Client(engine.url, token=engine.login(), ride_over_s=2)
    client.put_flow("far", [{"id": "n", "code": "def process():\n    return 1\n", "worker": "x"}])
    run = client.start_run("far")
    engine.stop(signal.SIGKILL)
    with pytest.raises(Unreachable, match=r"has not answered for 2 s, .*\(ride_over_s=2\)"):
        client.wait_run(run.id)
    with pytest.raises(Unreachable, match=r"\(ride_over_s=2\)"):
        next(iter(client.events()))


def test_runs_show_follow_carries_on_across_an_engine_restart(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1", port=port)
    token = engine.login()
    client = Client(engine.url, token=token)
    client.put_flow(
        "later", [{"id": "n", "code": "def process():\n    return 7\n", "worker": "later"}]
    )
    run = client.start_run("later")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update(FLUKSIO_URL=engine.api, FLUKSIO_TOKEN=token)
    follow = subprocess.Popen(
        [str(BIN / "fluksio"), "runs", "show", run.id, "--follow"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    second = worker = None
    try:
        # Its first line comes once its feed is open (it fetches the run on "ready").
        lines: list[str] = []
        reading = threading.Thread(target=lambda: lines.extend(follow.stdout or ()), daemon=True)
        reading.start()
        wait_for(lambda: lines, timeout=30, what="the command's first line")
        engine.stop(signal.SIGKILL)
        second = start_engine(data, tmp_path / "logs2", port=port)
        worker = start_labelled_worker(second, second.login(), "later", tmp_path / "worker")
        assert follow.wait(timeout=60) == 0, follow.stderr.read() if follow.stderr else ""
        reading.join(timeout=10)
        assert lines[0].startswith(f"run {run.id} of 'later': queued"), lines
        assert lines[-1] == f"run {run.id} of 'later': succeeded\n", lines
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait(timeout=10)
        if worker is not None:
            worker.stop()
        if second is not None:
            second.stop()


async def test_the_async_clients_wait_rides_over_a_restart_and_gives_up_in_its_sentence(
    tmp_path: Path,
) -> None:
    port, data = free_port(), tmp_path / "data"
    engine = start_engine(data, tmp_path / "logs1", port=port)
    token = engine.login()
    node: dict[str, object] = {
        "id": "n",
        "code": "def process():\n    return 7\n",
        "worker": "later",
    }
    second = worker = None
    async with AsyncClient(engine.url, token=token, ride_over_s=60) as client:
        await client.put_flow("later", [node])
        run = await client.start_run("later")
        waiting = asyncio.create_task(client.wait_run(run.id))
        try:
            engine.stop(signal.SIGKILL)
            second = start_engine(data, tmp_path / "logs2", port=port)
            worker = start_labelled_worker(second, second.login(), "later", tmp_path / "worker")
            ended = await asyncio.wait_for(waiting, timeout=60)
            assert (ended.state, ended.nodes[0].result) == ("succeeded", 7)
        finally:
            waiting.cancel()
            if worker is not None:
                worker.stop()
            if second is not None:
                second.stop()
        client.ride_over_s = 1
        with pytest.raises(Unreachable, match=r"\(ride_over_s=1\)"):
            await client.wait_run(run.id)


def test_a_worker_whose_engine_does_not_come_back_stops_and_exits_4(tmp_path: Path) -> None:
    # Before, it dialled a gone engine for ever (every 30 s at most), holding its machine.
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    admin = engine.login()
    worker = start_labelled_worker(
        engine, admin, "far", tmp_path / "worker", "--engine-away-s", "2"
    )
    try:
        wait_for(
            lambda: engine.client(admin).request("GET", "/workers").body,
            timeout=30,
            what="the worker attached",
        )
        engine.stop(signal.SIGKILL)
        assert worker.process.wait(timeout=60) == 4, worker.logs()
        assert "has not come back for 2 s (--engine-away-s): stopping 0 call(s)" in worker.logs()
    finally:
        worker.stop()
