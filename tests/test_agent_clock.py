"""The agent's side on a clock the test moves: its idle limit, its judgement of a silent
engine and a call's limit and silence timeout, asserted to the second without waiting.

A real agent (``Agent``, in the test's process) attaches over a real socket to an engine
in the test's process; only the agent's time is the test's to move.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from fluksio.agent.attaching import AgentConfig
from fluksio.agent.inventory import Inventory
from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import RunFrame
from fluksio.agent.session import Agent
from fluksio.agent.settings import WorkerSettings
from fluksio.agent.taken import TAKEN_WORD_SHARE
from fluksio.agent.urls import parse_attach_url
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.wait import async_wait_for, poll_async


@pytest.fixture
async def launcher() -> AsyncIterator[Launcher]:
    started = Launcher(mode="fork")
    await started.start()
    yield started
    await started.close()


@pytest.fixture
async def quiet(aiohttp_client: ClientFactory, tmp_path: Path) -> InProcessEngine:
    """An engine that sends the agent nothing of its own accord while a test runs."""
    return await start_in_process(
        aiohttp_client, tmp_path / "data", worker_ping_s=3600.0, worker_gone_s=36000.0
    )


async def _agent(
    api: InProcessEngine,
    launcher: Launcher,
    clock: ManualClock,
    *,
    max_idle: float | None = None,
    gone_s: float = 90.0,
    pipeline: int = 0,
) -> Agent:
    """An agent as ``fluksio-worker`` would configure it, on a manual clock."""
    token = await api.mint("clocked", ["clocked"])
    url = str(api.client.make_url("/api/v1/workers/attach")).replace("http", "ws", 1)
    options = WorkerSettings(
        url=(url,),
        token=token,
        name="clocked",
        labels="clocked",
        max_idle=max_idle,
        heartbeat=3600.0,
    )
    config = AgentConfig(
        settings=options,
        url=parse_attach_url(url, insecure=False),
        token=token,
        name="clocked",
        labels=["clocked"],
        inventory=Inventory(cpus=1, gpus=0, ram_mb=1024),
        pipeline=pipeline,
        gone_s=gone_s,
        ping_s=3600.0,
    )
    return Agent(config, launcher, clock)


async def _attached(api: InProcessEngine) -> bool:
    return await api.worker_status("clocked") is not None


async def _armed_after(clock: ManualClock, moment: float) -> bool:
    """The agent has looked since the clock moved: it has armed a timer after ``moment``."""
    return any(due > moment for due in clock.pending())


@asynccontextmanager
async def _attached_agent(
    api: InProcessEngine,
    launcher: Launcher,
    *,
    max_idle: float | None = None,
    gone_s: float = 90.0,
    pipeline: int = 0,
) -> AsyncIterator[tuple[ManualClock, asyncio.Task[int]]]:
    """A real agent on a manual clock, attached; no pings or heartbeats fall due, so the
    timers a test waits for are the ones it means. Ended when the block is left."""
    clock = ManualClock()
    agent = await _agent(api, launcher, clock, max_idle=max_idle, gone_s=gone_s, pipeline=pipeline)
    running = asyncio.create_task(agent.run())
    try:
        await poll_async(lambda: _attached(api), timeout=20, what="the agent to attach")
        yield clock, running
    finally:
        running.cancel()
        await async_wait_for(running.done, timeout=10, what="the agent to end")


async def test_an_idle_agent_stops_when_its_clock_says_max_idle_has_passed_and_not_before(
    quiet: InProcessEngine, launcher: Launcher
) -> None:
    async with _attached_agent(quiet, launcher, max_idle=30.0) as (clock, running):
        clock.advance(29)
        moved = clock.now()
        await poll_async(lambda: _armed_after(clock, moved), timeout=10, what="a look")
        assert not running.done(), "29 s idle of 30: it carries on"
        assert await _attached(quiet)
        clock.advance(1)
        assert await asyncio.wait_for(running, 10) == 0, "idle 30 s: it stops, exit 0"

        async def gone() -> bool:
            return not await _attached(quiet)

        await poll_async(gone, timeout=10, what="the engine to see it leave")


async def test_an_engine_silent_for_gone_s_on_the_agents_clock_is_let_go_and_dialled_again(
    quiet: InProcessEngine, launcher: Launcher
) -> None:
    async with _attached_agent(quiet, launcher, gone_s=90.0) as (clock, running):
        first = await quiet.request("GET", "/workers")
        (attached_id,) = [w["id"] for w in first.body]
        clock.advance(89)  # no timer of the agent's falls due before 90 s
        assert not running.done()
        assert [w["id"] for w in (await quiet.request("GET", "/workers")).body] == [attached_id]
        clock.advance(1)  # 90 s without a word from the engine: it lets the connection go

        async def let_go() -> bool:
            return not (await quiet.request("GET", "/workers")).body

        await poll_async(let_go, timeout=20, what="the engine to see the agent let go")

        async def backing_off() -> bool:
            # Its backoff before dialling again (under a second after a welcomed session)
            # is the one timer of its clock due that soon.
            now = clock.now()
            return any(now < due <= now + 1 for due in clock.pending())

        await poll_async(backing_off, timeout=20, what="the agent to wait out its backoff")
        clock.advance(1)

        async def reattached() -> bool:
            ids = [w["id"] for w in (await quiet.request("GET", "/workers")).body]
            return len(ids) == 1 and ids != [attached_id]

        await poll_async(reattached, timeout=20, what="the agent to dial again")
        assert not running.done()


# -- the call machinery: a call's own limits on the launcher's clock ----------------------

SLEEPS_AN_HOUR = "import time\n\ndef process():\n    time.sleep(3600)\n"


@pytest.mark.parametrize(
    ("limit", "timeout", "ended_as"),
    [(600.0, 0.0, "NodeLimit"), (None, 600.0, "NodeTimeout")],
    ids=["limit", "silence"],
)
async def test_a_calls_limit_and_silence_timeout_are_decided_on_the_launchers_clock(
    limit: float | None, timeout: float, ended_as: str
) -> None:
    clock = ManualClock()
    launched = Launcher(mode="fork", clock=clock)
    await launched.start()
    try:
        spec = RunFrame(
            call_id="c1",
            source=SLEEPS_AN_HOUR,
            node="process",
            flow="f",
            timeout=timeout,
            limit=limit,
        )
        running = asyncio.get_running_loop().create_task(launched.run(spec))
        due = clock.now() + 600

        async def armed() -> bool:
            return due in clock.pending()

        await poll_async(armed, timeout=30, what="the call's timer on the clock")
        clock.advance(599)
        assert due in clock.pending(), "not stopped a second early"
        clock.advance(1)  # ten minutes of the clock, in no time: the call is stopped
        outcome = await asyncio.wait_for(running, 60)
        assert outcome.error is not None and outcome.error["type"] == ended_as, outcome
    finally:
        await launched.close()


TAKE_S = 40.0
GATED = """
import os, time

def process(x, gate):
    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    return x
"""


async def test_a_call_sent_ahead_says_it_is_taken_after_a_quarter_of_the_take_rule(
    aiohttp_client: ClientFactory, tmp_path: Path, launcher: Launcher
) -> None:
    # Before, each call sent ahead cost a frame of its own at once ("taken"), though in a
    # busy worker another call's frame says as much within milliseconds. Now the word
    # waits a quarter of the engine's take rule and goes only if nothing else went.
    api = await start_in_process(
        aiohttp_client, tmp_path / "data", worker_ping_s=3600.0, worker_gone_s=36000.0,
        worker_take_s=TAKE_S,
    )  # fmt: skip
    gate = tmp_path / "gate"
    async with _attached_agent(api, launcher, pipeline=1) as (clock, _running):
        (session,) = api.engine.workers.sessions()
        node = {"id": "n", "code": GATED, "worker": "clocked", "params": {"gate": str(gate)}}
        await api.put_flow("gated", [node])
        first = await api.start_run("gated", x=1)

        async def first_started() -> bool:
            # Its `started` heard by the engine: it then holds the worker's one slot,
            # silent, and nothing more comes from the worker until the test says.
            machine = session.machine
            return len(machine.in_flight()) == 1 and machine.sent_ahead() == 0

        await poll_async(first_started, timeout=30, what="the first call to start")
        heard = session.machine.heard
        second = await api.start_run("gated", x=2)
        word_due = clock.now() + TAKE_S * TAKEN_WORD_SHARE

        async def word_armed() -> bool:
            return word_due in clock.pending()

        await poll_async(word_armed, timeout=30, what="the second call taken, its word armed")
        assert session.machine.heard == heard, "no word yet: a quarter of take_s is to pass"
        clock.advance(TAKE_S * TAKEN_WORD_SHARE)  # nothing else said it: the word goes now

        async def word_heard() -> bool:
            return session.machine.heard == heard + 1

        # Well within the engine's own take rule (real time here), which would otherwise
        # give the call back, and the worker's answer to that would be heard instead.
        await poll_async(word_heard, timeout=10, what="the engine to hear the second's word")
        gate.write_text("open")
        for run in (first, second):
            ended = await api.wait_run(run["id"], timeout=60)
            assert (ended["state"], ended["nodes"][0]["attempt"]) == ("succeeded", 1), ended
