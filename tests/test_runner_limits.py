"""The runner's bounds on a call: nothing the node started outlives it, a limit stops it
however much it reports (a call that ignores SIGTERM is killed after the grace), it gets
only the arguments its function takes, and a burst that fills the fork server's socket
all runs."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from fluksio.agent.launcher import LIMIT_GRACE_S, Launcher
from fluksio.agent.protocol.frames import RunFrame
from tests.support.escapees import ESCAPEES, ESCAPING
from tests.support.launching import launcher, node, run
from tests.support.process import alive
from tests.support.wait import async_wait_for

pytestmark = pytest.mark.process
__all__ = ["launcher"]  # the fixture, used by name

PYENV = Path.home() / ".pyenv" / "versions"


@pytest.mark.parametrize(
    ("ending", "fields"),
    [
        ("return", {}),
        ("cancel", {}),
        ("limit", {"limit": 1.0}),
        ("timeout", {"timeout": 1.0}),
    ],
)
async def test_nothing_the_node_started_outlives_its_call(
    launcher: Launcher, tmp_path: Path, ending: str, fields: dict[str, float]
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    then = {"return": "return", "timeout": "quiet"}.get(ending, "busy")
    spec = RunFrame(
        call_id="escaping",
        source=ESCAPING,
        node="n",
        flow="f",
        kwargs={"marks": str(marks), "then": then},
        limit=fields.get("limit"),
        timeout=fields.get("timeout", 0.0),
    )
    task = asyncio.create_task(launcher.run(spec))
    await async_wait_for(
        lambda: all((marks / name).exists() for name in ESCAPEES),
        timeout=15,
        what="the node to start its escapees",
    )
    pids = {name: int((marks / name).read_text()) for name in ESCAPEES}
    if ending == "cancel":
        launcher.cancel("escaping")
    outcome = await asyncio.wait_for(task, 15)
    expected = {"cancel": "NodeCancelled", "limit": "NodeLimit", "timeout": "NodeTimeout"}
    assert (outcome.error or {}).get("type") == expected.get(ending), outcome
    ended = time.monotonic()
    await async_wait_for(
        lambda: not any(alive(pid) for pid in pids.values()),
        timeout=10,
        what=f"every escapee to end: {pids}",
    )
    assert time.monotonic() - ended <= 5, "gone within 5 s of the call's end"


async def test_a_limit_stops_a_call_however_much_it_reports(launcher: Launcher) -> None:
    chatty = """
        import time, fluksio
        def process():
            for i in range(600):
                time.sleep(0.05)
                fluksio.emit(i=i)
            return "finished"
    """
    outcome, events = await run(launcher, chatty, timeout=1.0, limit=1.5)
    assert events, "it reported all along, so its silence timeout never fired"
    assert outcome.error["type"] == "NodeLimit"
    assert outcome.error["message"] == "ran for 1.5 s, its limit, and was stopped"


async def test_a_call_that_ignores_sigterm_at_its_limit_is_killed_after_the_grace(
    launcher: Launcher,
) -> None:
    stubborn = """
        import signal, time
        def process():
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(300)
    """
    outcome, _ = await asyncio.wait_for(run(launcher, stubborn, limit=0.5), LIMIT_GRACE_S + 10)
    assert outcome.error["type"] == "NodeLimit"
    assert outcome.exit_status == -signal.SIGKILL, "SIGTERM was ignored, so it was killed"


async def test_a_call_is_given_only_the_arguments_its_function_takes(launcher: Launcher) -> None:
    # The engine sends every name it could when its own Python cannot parse the node.
    source = "def process(x, *, y=0):\n    return [x, y]\n"
    outcome, _ = await run(launcher, source, kwargs={"x": 1, "y": 2, "other": 3})
    assert outcome.ok and outcome.result == [1, 2]
    everything = "def process(**given):\n    return sorted(given)\n"
    outcome, _ = await run(launcher, everything, kwargs={"a": 1, "b": 2}, call_id="c2")
    assert outcome.result == ["a", "b"]


async def test_a_burst_of_calls_that_fills_the_fork_servers_socket_all_run(
    launcher: Launcher,
) -> None:
    # Sixty-four specs of ~100 KB each are far more than the socket holds: senders wait
    # until the loop sees room again (woken, not polling), and none is lost or mixed up.
    source = node(
        """
        def process(blob, n):
            return [n, len(blob)]
        """
    )
    specs = [
        RunFrame(
            call_id=f"burst{n}",
            source=source,
            node="n",
            flow="f",
            kwargs={"blob": "x" * 100_000, "n": n},
        )
        for n in range(64)
    ]
    async with asyncio.timeout(120):
        outcomes = await asyncio.gather(*(launcher.run(spec) for spec in specs))
    assert [o.result for o in outcomes] == [[n, 100_000] for n in range(64)]
