"""A call told its end is coming: one that runs until its batch job ends gets its notice
signal ``notice_s`` before it is stopped, and ``fluksio.time_left()`` says how long it
has; a node that handles the notice may save its state and return; one that ignores it
runs on until it is stopped, as if it had none. Real call processes, both modes."""

from __future__ import annotations

import time

import pytest

from fluksio.agent.launcher import Launcher
from tests.support.launching import launcher, run

pytestmark = pytest.mark.process
__all__ = ["launcher"]  # the fixture, used by name

SAVES_ON_NOTICE = """
    import os, signal, time
    import fluksio

    told = []

    def process():
        signal.signal(signal.SIGUSR1, lambda *_: told.append(fluksio.time_left()))
        at_start = fluksio.time_left()
        while not told:
            time.sleep(0.02)
        return {"at_start": at_start, "at_notice": told[0],
                "signal": os.environ["FLUKSIO_NOTICE_SIGNAL"]}
"""

IGNORES_NOTICE = """
    import time

    def process():
        time.sleep(30)
"""


async def test_a_call_gets_its_notice_before_its_jobs_end_and_may_return(
    launcher: Launcher,
) -> None:
    started = time.monotonic()
    outcome, _events = await run(launcher, SAVES_ON_NOTICE, limit=6.0, notice_s=4.0)
    took = time.monotonic() - started
    assert outcome.ok, outcome.error
    told = outcome.result
    assert 5.0 <= told["at_start"] <= 6.0, told
    assert 3.0 <= told["at_notice"] <= 4.5, "notice comes with its lead to spare"
    assert told["signal"] == "SIGUSR1"
    assert 1.5 <= took < 6.0, "it returned on its notice, before its limit"


async def test_a_call_that_ignores_its_notice_is_stopped_at_its_limit(
    launcher: Launcher,
) -> None:
    started = time.monotonic()
    outcome, _events = await run(launcher, IGNORES_NOTICE, limit=2.0, notice_s=1.5)
    assert outcome.error["type"] == "NodeLimit", "the notice did not end it: its limit did"
    assert time.monotonic() - started >= 2.0


async def test_a_call_without_a_limit_knows_nothing_bounds_it(launcher: Launcher) -> None:
    source = "import fluksio\ndef process():\n    return fluksio.time_left()\n"
    outcome, _events = await run(launcher, source)
    assert outcome.ok and outcome.result is None


async def test_a_notice_due_at_once_does_not_end_a_call_that_has_just_started(
    launcher: Launcher,
) -> None:
    """Less time than its lead: the notice goes as the call starts, before its runner can
    catch it, and SIGUSR1's default would end the process (a RemoteError). It must not."""
    for attempt in range(5):
        outcome, _events = await run(
            launcher, IGNORES_NOTICE, call_id=f"c{attempt}", limit=0.5, notice_s=100.0
        )
        assert outcome.error["type"] == "NodeLimit", outcome.error
