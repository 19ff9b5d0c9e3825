"""What a site allows is kept across a restart (issue 65, item 12): the last reading is
written down, so an engine restarted while the accounting fails (slurmdbd down) or hangs
keeps to it; and a profile whose site was never read submits one job at a time until it
is. In process, a scripted provisioner whose site answers as the test says."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fluksio.engine.provisioning import Configured
from fluksio.provisioners.base import JobState, JobStatus, SiteLimit
from fluksio.provisioners.plugins import build_plugins
from fluksio.provisioners.site_reader import SITE_READ_WITHIN_S
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"
QOS = "QOS 'short' allows 1 job per user (MaxSubmitJobsPerUser)"


class SiteScripted(Scripted):
    """``site``: what the accounting answers: limits, an error, or (None) no answer."""

    site: Mapping[str, SiteLimit] | Exception | None = None

    async def site_limits(self) -> Mapping[str, SiteLimit]:
        if self.site is None:
            await asyncio.Event().wait()  # sacctmgr hanging on a slurmdbd that never answers
        if isinstance(self.site, Exception):
            raise self.site
        assert self.site is not None
        return self.site


async def _engine(
    aiohttp_client: ClientFactory, data: Path, site: Any
) -> tuple[InProcessEngine, SiteScripted, ManualClock]:
    profiles = [{"name": "small", "labels": ["hpc"], "max_workers": 3}]
    provisioner = SiteScripted(scripted_settings(profiles=profiles))
    provisioner.site = site
    clock = ManualClock()
    api = await start_in_process(
        aiohttp_client,
        data,
        provisioners=Configured(build_plugins(), [provisioner]),
        clock=clock,
    )
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    return api, provisioner, clock


async def _three_calls_then(
    api: InProcessEngine, provisioner: SiteScripted, clock: ManualClock
) -> str | None:
    """Three calls wait for the profile: one job goes out, its worker attaches and takes
    one, and no second job goes out for the two left. What the profile's view says of
    its site."""
    for _ in range(3):
        await api.start_run("hpc")

    def submitted() -> bool:
        if provisioner.site is None:  # hanging: no answer in time is a failed reading
            clock.advance(SITE_READ_WITHIN_S / 4)
        return bool(provisioner.submitted)

    await async_wait_for(submitted, timeout=5, what="a submission")
    job = provisioner.submitted[-1]
    provisioner.jobs[job] = JobStatus(JobState.RUNNING, "RUNNING")
    worker = await api.attach(provisioner.tokens[-1], name="box-small", labels=["hpc"])
    await worker.next_call()
    for _ in range(50):  # every turn the driver takes meanwhile submits nothing more
        await asyncio.sleep(0)
    assert provisioner.submitted == [job], "no more jobs than the site allows"
    resources = (await api.request("GET", "/workers/resources")).body
    said: str | None = resources["provisioners"][0]["profiles"][0]["site_limit"]
    return said


async def test_a_restarted_engine_keeps_to_the_last_reading_while_the_site_fails_or_hangs(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    data = tmp_path / "d"
    first, made, clock = await _engine(aiohttp_client, data, {"small": SiteLimit(1, QOS)})
    run = await first.start_run("hpc")
    await async_wait_for(lambda: made.submitted, timeout=5, what="a submission")
    await first.request("POST", f"/runs/{run['id']}/cancel")
    made.jobs[made.submitted[0]] = JobStatus(JobState.CANCELLED, "CANCELLED")

    async def ended() -> bool:
        clock.advance(10)  # its next poll finds the job gone
        view = (await first.request("GET", "/workers/resources")).body
        return view["provisioners"][0]["profiles"][0]["outstanding"] is None

    await poll_async(ended, timeout=10, what="the first engine's job to end")
    await first.client.close()
    for failing in (RuntimeError("slurmdbd is down"), None):
        # Before, the restarted engine knew no limit and submitted 3 jobs for a limit of 1.
        api, provisioner, clock = await _engine(aiohttp_client, data, failing)
        reason = await _three_calls_then(api, provisioner, clock)
        assert reason == f"at most 1 job at once: {QOS}"
        await api.client.close()


async def test_a_site_never_read_gets_one_job_at_a_time_and_says_why(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, provisioner, clock = await _engine(aiohttp_client, tmp_path / "d", OSError("down"))
    reason = await _three_calls_then(api, provisioner, clock)
    assert reason == "what the site allows could not be read yet: one job at a time until it is"
