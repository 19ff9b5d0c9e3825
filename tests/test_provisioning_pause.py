"""A profile that keeps failing pauses itself, and a person may pause and resume one: on
an in-process engine whose clock the test moves, with a provisioner whose site is a dict.

What a user notices: after the site refused the profile's submissions N times in a row,
nothing more is submitted however long the call waits, and the call's reason says why
and how to resume; after ``resume`` the next submission goes out at once. A pause by hand
outlasts the engine.
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from fluksio.engine.provisioning import Configured
from fluksio.provisioners.plugins import build_plugins
from tests.support.client import SUPERUSER
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"
REFUSAL = "sbatch: error: invalid partition specified: nope"
RESUME = "resume with 'fluksio provisioners resume box/small'"


async def _engine(
    aiohttp_client: ClientFactory, data: Path, provisioner: Scripted, clock: ManualClock
) -> InProcessEngine:
    configured = Configured(build_plugins(), [provisioner])
    return await start_in_process(aiohttp_client, data, provisioners=configured, clock=clock)


def _scripted() -> Scripted:
    return Scripted(
        scripted_settings(
            provision_timeout_s=600, retry_base_s=30, pause_after_failed_submissions=3
        )
    )


def _has(seen: list[str], count: int) -> bool:
    return len(seen) == count


async def _settle() -> None:
    """Let the engine's passes and the provisioner's tasks run (a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _profile(api: InProcessEngine) -> dict[str, object]:
    body = (await api.request("GET", "/workers/resources")).body
    profile: dict[str, object] = body["provisioners"][0]["profiles"][0]
    return profile


async def test_refused_submissions_pause_the_profile_until_a_person_resumes_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    provisioner, clock = _scripted(), ManualClock()
    provisioner.refuse = REFUSAL
    api = await _engine(aiohttp_client, tmp_path / "data", provisioner, clock)
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    run = await api.start_run("hpc")
    for refusals in (1, 2, 3):
        await async_wait_for(
            functools.partial(_has, provisioner.refused, refusals),
            timeout=5,
            what=f"refusal {refusals}",
        )
        clock.advance(600)  # past the longest rest the refusals so far began
    paused = f"paused after 3 failed submissions in a row (the last: {REFUSAL}); {RESUME}"

    async def says_paused() -> bool:
        return await api.first_queued_reason() == f"provisioning box/small, {paused}"

    await poll_async(says_paused, timeout=5, what="the call's reason to say it is paused")
    assert (await _profile(api))["paused"] == paused
    for _ in range(3):  # however long the call waits, the site is asked nothing more
        clock.advance(3600)
        await _settle()
    assert len(provisioner.refused) == 3 and provisioner.submitted == []

    provisioner.refuse = None  # the site mended (the partition made)
    resumed = await api.request("POST", "/provisioners/box/small/resume")
    assert resumed.status == 200 and resumed.body["paused"] is None
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission at once")
    assert await api.first_queued_reason() == "provisioning box/small, job 100 submitted"
    assert (await api.request("GET", f"/runs/{run['id']}")).body["state"] == "queued"


async def test_a_job_that_never_brings_its_worker_counts_apart_from_refusals(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """Taken jobs that end before their worker attaches pause the profile at their own
    count (3 by default); a refusal between them neither adds to it nor ends it."""
    provisioner, clock = _scripted(), ManualClock()
    api = await _engine(aiohttp_client, tmp_path / "data", provisioner, clock)
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    await api.start_run("hpc")
    failures = 0

    async def failed_once_more() -> None:
        nonlocal failures
        failures += 1

        async def counted() -> bool:
            return (await _profile(api))["failures"] == failures

        await poll_async(counted, timeout=5, what=f"failure {failures}")
        clock.advance(600)  # its rest ends

    for started in (1, 2, 3):
        if started == 2:  # one refusal between the failed starts
            provisioner.refuse = REFUSAL
            await failed_once_more()
            provisioner.refuse = None
        await async_wait_for(
            functools.partial(_has, provisioner.submitted, started),
            timeout=5,
            what=f"job {started}",
        )
        provisioner.jobs.pop(str(99 + started))  # it left the queue, no worker attached
        clock.advance(10)  # the next poll notices
        await failed_once_more()
    ended = "job 102 left the queue before its worker attached"
    paused = f"paused after 3 jobs that failed to start in a row (the last: {ended}); {RESUME}"

    async def says_paused() -> bool:
        return (await _profile(api))["paused"] == paused

    await poll_async(says_paused, timeout=5, what="the profile to pause itself")
    clock.advance(3600)
    await _settle()
    assert len(provisioner.submitted) == 3


async def test_a_pause_by_hand_is_kept_across_a_restart_and_ends_with_resume(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    data, clock = tmp_path / "data", ManualClock()
    first = await _engine(aiohttp_client, data, _scripted(), clock)
    answer = await first.request("POST", "/provisioners/box/small/pause")
    assert answer.status == 200
    assert answer.body["paused"] == f"paused by {SUPERUSER}; {RESUME}"
    await first.client.close()

    provisioner = _scripted()
    second = await _engine(aiohttp_client, data, provisioner, clock)
    await second.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    await second.start_run("hpc")

    async def says_paused() -> bool:
        reason = await second.first_queued_reason()
        return reason == f"provisioning box/small, paused by {SUPERUSER}; {RESUME}"

    await poll_async(says_paused, timeout=5, what="the call's reason to say who paused it")
    clock.advance(600)
    await _settle()
    assert provisioner.submitted == []
    assert (await second.request("POST", "/provisioners/box/small/resume")).status == 200
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")


async def test_pausing_a_profile_not_configured_names_it(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await _engine(aiohttp_client, tmp_path / "data", _scripted(), ManualClock())
    answer = await api.request("POST", "/provisioners/box/large/pause")
    assert answer.status == 404
    assert answer.body["detail"] == (
        "profile: no profile 'box/large' is configured (configured: box/small)"
    )
