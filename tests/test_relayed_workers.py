"""A worker whose connection passes through a relay (a login node's) and drops while it lives.

Its calls in flight are held for it by the 90-second rule: it attaches again naming them
(``resume``), and they carry on, under the same worker; one that does not come back fails
them at 90 s. A worker attached directly still fails its calls at once when its socket
closes, as the spec says. The engine runs in this process on a clock the test advances;
the workers are scripted ends of real sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.agent.protocol.frames import ProgressFrame, encode
from fluksio.engine.provisioning import Configured
from fluksio.provisioners.plugins import build_plugins
from tests.support.clock import ManualClock
from tests.support.engine import EngineProcess, start_engine
from tests.support.inprocess import (
    ClientFactory,
    InProcessEngine,
    ScriptedWorker,
    cpu_flow_on_a_manual_clock,
    start_in_process,
)
from tests.support.proxy import PausableProxy
from tests.support.runs import code, node_of, nodes_of, run_flow, wait_run
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for, wait_for
from tests.support.worker import WorkerProcess, start_worker

NODE = "def process():\n    return 1\n"


async def _busy_relayed_worker(api: InProcessEngine) -> tuple[str, ScriptedWorker, str, str]:
    """A relayed worker running a call: its token, its socket, the run's and call's ids."""
    token = await api.mint("box", ["cpu"])
    worker = await api.attach(token, name="box", labels=["cpu"], relayed=True)
    run = await api.start_run("cpu")
    call = (await worker.next_call())["call_id"]
    return token, worker, str(run["id"]), str(call)


async def _away_relayed_worker(api: InProcessEngine) -> tuple[str, str, str]:
    """A relayed worker that dropped mid-call, unheard since: its token, run's and call's ids."""
    token, worker, run_id, call = await _busy_relayed_worker(api)
    await worker.close()
    session = api.engine.workers.attached()[0]
    await async_wait_for(
        lambda: session.machine.phase == "away", timeout=5, what="the worker to be away"
    )
    return token, run_id, call


async def _places(api: InProcessEngine) -> dict[str, str]:
    places = (await api.request("GET", "/workers/resources")).body["places"]
    return {p["name"]: p["id"] for p in places if p["name"] != "engine"}


async def test_a_relayed_worker_that_comes_back_finishes_its_call_as_the_same_worker(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    token, worker, run_id, call = await _busy_relayed_worker(api)
    before = await _places(api)
    await worker.send_raw(encode(ProgressFrame(call_id=call, event="heartbeat")))
    await worker.close()  # the relay's SSH connection dropped
    clock.advance(30)
    assert nodes_of(await api.run(run_id))["n"]["state"] == "running", "held, not failed"
    # Meanwhile nothing new goes to it.
    other = await api.start_run("cpu")
    assert other["state"] == "queued"
    back = await api.attach(token, name="box", labels=["cpu"], relayed=True, resume=[call])
    assert back.greeting["op"] == "welcome"
    assert await _places(api) == before, "the same worker, not a new one"
    await back.answer(call, 7)
    node = nodes_of(await api.wait_run(run_id, timeout=10))["n"]
    assert (node["state"], node["result"], node["ran_on"]) == ("succeeded", 7, "box")
    # It answers again: the queued run comes to it.
    second = await back.next_call()
    await back.answer(second["call_id"], 8)
    assert nodes_of(await api.wait_run(other["id"], timeout=10))["n"]["result"] == 8


async def test_a_relayed_worker_cut_off_before_it_was_heard_keeps_its_call_which_runs_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # The path dropped after the run frame went out and before any frame of the worker's
    # came back. Before, at 15 s the call was requeued as never taken, the returning
    # worker told to drop it, and the call sent again: two starts, without retries.
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    token, run_id, call = await _away_relayed_worker(api)
    clock.advance(30)  # twice the take rule's 15 s
    node = nodes_of(await api.run(run_id))["n"]
    assert (node["state"], node["events"]) == ("running", []), "held, not requeued"
    back = await api.attach(token, name="box", labels=["cpu"], relayed=True, resume=[call])
    await back.answer(call, 7)
    node = nodes_of(await api.wait_run(run_id, timeout=10))["n"]
    assert (node["state"], node["result"]) == ("succeeded", 7)
    assert back.cancelled == [], "the call it holds is never taken from it"


async def test_a_silent_relayed_worker_keeps_its_call_past_the_take_rule(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # Connected but unheard past the take rule (its relay's path may be paused): held.
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    _token, worker, run_id, call = await _busy_relayed_worker(api)
    clock.advance(16)
    other = await api.start_run("cpu")
    assert other["state"] == "queued"
    assert nodes_of(await api.run(run_id))["n"]["state"] == "running"
    await worker.answer(call, 3)
    assert nodes_of(await api.wait_run(run_id, timeout=10))["n"]["result"] == 3
    clock.advance(3)  # the next check of the workers (every 2 s) sees it answer
    second = await worker.next_call()  # heard again: it takes calls again
    await worker.answer(second["call_id"], 4)
    assert nodes_of(await api.wait_run(other["id"], timeout=10))["n"]["result"] == 4
    assert worker.cancelled == []


async def test_a_relayed_worker_that_does_not_come_back_fails_its_call_at_90_s(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    _token, worker, run_id, call = await _busy_relayed_worker(api)
    session = api.engine.workers.attached()[0]
    heard = session.machine.heard
    await worker.send_raw(encode(ProgressFrame(call_id=call, event="heartbeat")))
    await async_wait_for(
        lambda: session.machine.heard > heard, timeout=5, what="the heartbeat heard"
    )
    await worker.close()
    await async_wait_for(
        lambda: session.machine.phase == "away", timeout=5, what="the worker to be away"
    )
    clock.advance(89)
    assert nodes_of(await api.run(run_id))["n"]["state"] == "running"
    clock.advance(2)
    node = nodes_of(await api.wait_run(run_id, timeout=10))["n"]
    assert node["error"]["type"] == "WorkerGone"
    assert node["error"]["message"] == (
        "no message from the worker for 90 s while it was executing; its calls failed as gone"
    )
    await async_wait_for(lambda: not api.engine.workers.attached(), timeout=10, what="it to leave")
    assert await _places(api) == {}


async def test_a_call_a_returning_worker_never_got_is_queued_again_and_runs_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, _clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    token, run_id, call = await _away_relayed_worker(api)
    back = await api.attach(token, name="box", labels=["cpu"], relayed=True, resume=["c-unknown"])
    await async_wait_for(lambda: back.cancelled == ["c-unknown"], timeout=5, what="the cancel")

    # The call it did not name never reached it: it goes back in line and, the worker
    # being back and answering, runs (once) there, instead of failing as gone.
    again = await back.next_call(timeout=10)
    assert again["call_id"] != call, "queued again: a new call of the same node"
    await back.answer(again["call_id"], result="ran once")
    node = nodes_of(await api.wait_run(run_id, timeout=10))["n"]
    assert (node["state"], node["result"], node["attempt"]) == ("succeeded", "ran once", 1), node


async def test_a_direct_worker_that_drops_fails_its_call_at_once(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, _clock = await cpu_flow_on_a_manual_clock(aiohttp_client, tmp_path / "data")
    worker = await api.attach(await api.mint("box", ["cpu"]), name="box", labels=["cpu"])
    run = await api.start_run("cpu")
    await worker.next_call()
    await worker.close()
    node = nodes_of(await api.wait_run(run["id"], timeout=10))["n"]
    assert node["error"]["message"] == "worker went away mid-call"


# -- our agent, for real: a relay that drops mid-call ---------------------------------------


@contextlib.contextmanager
def _relayed_agent(
    tmp_path: Path, *engine_args: str
) -> Iterator[tuple[EngineProcess, str, PausableProxy, WorkerProcess]]:
    """An engine, and our agent labelled ``far`` reaching it through a relay (the login
    node's, in a test's hands): the engine, an access token, the relay and the worker."""
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=engine_args)
    relay = PausableProxy(int(engine.url.rsplit(":", 1)[1]))
    worker = None
    try:
        admin = engine.login()
        token = engine.mint(admin, "far", ["far"])["token"]
        port = engine.url.rsplit(":", 1)[1]
        worker = start_worker(
            engine, token, tmp_path / "worker", "--labels", "far",
            "--connect-to", f"127.0.0.1:{relay.port}",
            url=f"ws://127.0.0.1:{port}/api/v1/workers/attach",
        )  # fmt: skip
        yield engine, admin, relay, worker
    finally:
        if worker is not None:
            worker.stop()
        relay.close()
        engine.stop()


SLOW = code("""
    import time, fluksio
    def process():
        for step in range(3):
            time.sleep(1)
            fluksio.emit(step=step)
        return "done"
""")


@pytest.mark.process
def test_our_agent_keeps_its_call_through_a_relay_drop_and_resumes_it(tmp_path: Path) -> None:
    with _relayed_agent(tmp_path) as (engine, admin, relay, worker):
        run_id = run_flow(engine, admin, "far", [{"id": "n", "worker": "far", "code": SLOW}])
        wait_for(
            lambda: node_of(engine, admin, run_id, "n")["state"] == "running",
            timeout=30,
            what="the call to run",
        )
        relay.cut()  # the login node's SSH connection went: every relayed connection ends
        run = wait_run(engine, admin, run_id, timeout=60)
        node = nodes_of(run)["n"]
        assert (node["state"], node["result"]) == ("succeeded", "done"), node
        assert [e["outputs"]["step"] for e in node["events"]] == [0, 1, 2], "nothing lost"
        assert "dropped): keeping 1 call(s) for up to 600 s" in worker.logs()


@pytest.mark.process
def test_a_call_whose_relayed_worker_was_cut_off_before_it_was_heard_starts_once(
    tmp_path: Path,
) -> None:
    # Measured before with real agents: a ledger showed 2 starts and 2 ends, no retries.
    ledger, go_on = tmp_path / "ledger", tmp_path / "go-on"
    node = code(f"""
        import os, time
        def process():
            with open({str(ledger)!r}, "a") as kept:
                kept.write("start\\n")
            deadline = time.monotonic() + 120
            while not os.path.exists({str(go_on)!r}) and time.monotonic() < deadline:
                time.sleep(0.05)
            with open({str(ledger)!r}, "a") as kept:
                kept.write("end\\n")
            return "once"
    """)
    with _relayed_agent(tmp_path, "--worker-take-s", "1") as (engine, admin, relay, worker):

        def status() -> str:
            found = engine.client(admin).request("GET", "/workers").body
            return str(found[0]["status"]) if found else ""

        wait_for(status, timeout=30, what="the worker attached")
        relay.hold_upward()  # the run frame reaches the worker; nothing of its comes back
        run_id = run_flow(engine, admin, "far", [{"id": "n", "worker": "far", "code": node}])
        wait_for(ledger.exists, timeout=30, what="the call to start on the worker")
        relay.cut()  # the path drops, what the worker said still held: it is away
        # It stays away (its hellos held too) past the take rule's time, which the engine
        # logs when it comes.
        wait_for(lambda: "worker.not_taking" in engine.logs(), timeout=30, what="the take rule")
        relay.release_upward()
        wait_for(
            lambda: "keeping 1 call(s)" in worker.logs() and status() == "busy",
            timeout=60,
            what="the worker back, carrying its call",
        )
        go_on.touch()
        run = wait_run(engine, admin, run_id, timeout=60)
        ran = nodes_of(run)["n"]
        assert (ran["state"], ran["result"]) == ("succeeded", "once"), ran
        assert ledger.read_text().split() == ["start", "end"], "it started once"


@pytest.mark.process
def test_an_answer_lost_with_the_relays_path_is_sent_again_and_the_call_succeeds(
    tmp_path: Path,
) -> None:
    # The call ends while the path holds what the worker sends, then the path drops: its
    # answer went into the path and never arrived. Before, the returning worker did not
    # name the call, and it failed WorkerGone, its result lost.
    node = code("""
        import os
        def process():
            return os.urandom(150_000).hex()  # does not shrink in the socket's deflate
    """)
    with _relayed_agent(tmp_path) as (engine, admin, relay, worker):
        wait_for(
            lambda: engine.client(admin).request("GET", "/workers").body,
            timeout=30,
            what="the worker attached",
        )
        relay.hold_upward()
        before = relay.upward_bytes
        run_id = run_flow(engine, admin, "far", [{"id": "n", "worker": "far", "code": node}])
        wait_for(
            lambda: relay.upward_bytes - before > 100_000,
            timeout=30,
            what="the answer written into the held path",
        )
        relay.cut()
        relay.release_upward()
        ran = nodes_of(wait_run(engine, admin, run_id, timeout=60))["n"]
        assert ran["state"] == "succeeded", ran.get("error")
        assert len(ran["result"]) == 300_000
        assert "keeping 1 call(s)" in worker.logs()


async def test_while_the_way_in_is_down_waiting_calls_and_the_workers_view_say_so(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    provisioner = Scripted(scripted_settings(provision_timeout_s=600))
    api = await start_in_process(
        aiohttp_client,
        tmp_path / "data",
        provisioners=Configured(build_plugins(), [provisioner]),
        clock=ManualClock(),
    )
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    await api.start_run("hpc")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")

    async def said() -> tuple[str, str | None]:
        body = (await api.request("GET", "/workers/resources")).body
        (profile,) = body["provisioners"][0]["profiles"]
        return body["queued"][0]["reason"], profile["path_down"]

    assert await said() == ("provisioning box/small, job 100 submitted", None)
    down = (
        "the way in through login1 is down since 10:04:12 UTC (connection lost); it is being"
        " built again"
    )
    provisioner.set_path(down)
    assert await said() == (f"provisioning box/small, {down}", down)
    provisioner.set_path(None)
    assert await said() == ("provisioning box/small, job 100 submitted", None)
