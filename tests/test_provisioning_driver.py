"""The provisioning driver's rules, in one process, with a provisioner whose system is a dict.

The Slurm and local tests show the same rules end to end; these pin the orderings that a
real cluster cannot be made to produce on demand (a worker attaching before the
submission's answer arrives) and the arithmetic of the backoff.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pluggy

from fluksio.provisioners import hookspecs
from fluksio.provisioners.base import (
    JobState,
    JobStatus,
    Profile,
    Provisioner,
    ProvisionError,
    ProvisionerSettings,
    Submission,
    WorkerEvent,
)
from fluksio.provisioners.driver import ProvisioningDriver, Request
from tests.support.wait import async_wait_for


class Scripted(Provisioner):
    """Jobs are entries of ``self.jobs``; ``gate`` holds submissions until it is set."""

    type_name = "scripted"

    def __init__(self, settings: ProvisionerSettings) -> None:
        super().__init__(settings)
        self.jobs: dict[str, JobStatus] = {}
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.refuse: str | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    def render(self, profile: Profile, *, token_file: str) -> str:
        return f"run a worker for {profile.name}\n"

    async def submit(self, profile: Profile, *, request_id: str, token: str) -> Submission:
        await self.gate.wait()
        if self.refuse:
            raise ProvisionError(self.refuse)
        job_id = str(100 + len(self.submitted))
        self.submitted.append(request_id)
        self.jobs[job_id] = JobStatus(JobState.PENDING, "PENDING", "Priority")
        return Submission(job_id, profile.name)

    async def poll(self, job_ids: Iterable[str]) -> Mapping[str, JobStatus]:
        return {job_id: self.jobs[job_id] for job_id in job_ids if job_id in self.jobs}

    async def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        self.jobs.pop(job_id, None)


class Engine:
    def __init__(self) -> None:
        self.revoked: list[str] = []
        self.stored: dict[str, Request] = {}
        self.changes = 0

    def mint_token(self, provisioner: str, profile: Profile, request_id: str) -> tuple[str, str]:
        return f"token-{request_id}", f"jti-{request_id}"

    def revoke_token(self, jti: str, reason: str) -> None:
        self.revoked.append(jti)

    def remember(self, request: Request) -> None:
        assert request.job_id is not None
        self.stored[request.id] = request

    def forget(self, request_id: str) -> None:
        self.stored.pop(request_id, None)

    def changed(self) -> None:
        self.changes += 1


def _driver(**settings: Any) -> tuple[ProvisioningDriver, Scripted, Engine]:
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    config = {
        "type": "scripted",
        "name": "box",
        "engine_url": "ws://127.0.0.1:1/api/v1/workers/attach",
        "poll_interval_s": 0.05,
        "profiles": [{"name": "small", "labels": ["hpc"]}],
        **settings,
    }
    provisioner = Scripted(ProvisionerSettings.model_validate(config))
    engine = Engine()
    return ProvisioningDriver(manager, [provisioner], engine), provisioner, engine


def _attached(request_id: str) -> WorkerEvent:
    return WorkerEvent("w1", "box-small", ("hpc",), "box", "small", request_id, None)


async def test_asked_again_and_again_it_submits_once() -> None:
    driver, provisioner, _engine = _driver()
    for _ in range(50):
        driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    for _ in range(50):
        driver.want("box", "small")
    await asyncio.sleep(0)
    assert len(provisioner.submitted) == 1
    assert driver.describe("box/small") == "job 100 submitted"
    await async_wait_for(
        lambda: driver.describe("box/small") == "job 100 PENDING (Priority)",
        timeout=5,
        what="the first poll",
    )
    await driver.close()
    assert provisioner.cancelled == ["100"]


async def test_a_worker_attaching_before_the_submissions_answer_stays_attached() -> None:
    profiles = [{"name": "small", "labels": ["hpc"]}, {"name": "later", "labels": ["x"]}]
    driver, provisioner, engine = _driver(provision_timeout_s=0.2, profiles=profiles)
    provisioner.gate.clear()
    driver.want("box", "small")  # the request is listed at once, submitting
    (request_id,) = [r["request_id"] for r in driver.view()[0]["profiles"][0]["jobs"]]
    driver.worker_attached(_attached(request_id))
    provisioner.gate.set()
    await async_wait_for(lambda: engine.stored, timeout=5, what="the request to be stored")
    assert engine.stored[request_id].stage == "attached"
    # A request made later, whose worker never comes, times out after the first one's
    # deadline: by then the attached request would have been cut too, were it timed.
    driver.want("box", "later")
    await async_wait_for(lambda: provisioner.cancelled, timeout=5, what="the later timeout")
    assert provisioner.cancelled == ["101"]
    assert engine.revoked == [f"jti-{r}" for r in provisioner.submitted[1:]]
    profile = driver.view()[0]["profiles"][0]
    assert profile["outstanding"] is None and profile["workers"][0]["job_id"] == "100"
    await driver.close()
    assert provisioner.cancelled == ["101"]  # an attached worker's job outlives the engine


async def test_failures_rest_the_profile_doubling_up_to_the_cap() -> None:
    driver, provisioner, _engine = _driver(retry_base_s=0.1, retry_max_s=0.3)
    provisioner.refuse = "sbatch refused the job: no"
    rests = []
    for _ in range(4):
        driver.want("box", "small")
        view = await async_wait_for(
            lambda: driver.view()[0]["profiles"][0]["retry_at"] and driver.view()[0],
            timeout=5,
            what="a failure",
        )
        profile = view["profiles"][0]
        rests.append(round(profile["retry_at"] - profile["last_error"]["at"], 2))
        driver.want("box", "small")  # resting: not asked again
        await async_wait_for(
            lambda: driver.view()[0]["profiles"][0]["retry_at"] is None,
            timeout=5,
            what="the rest to end",
        )
    assert rests == [0.1, 0.2, 0.3, 0.3]
    assert driver.describe("box/small") == "the last attempt failed (sbatch refused the job: no)"
    provisioner.refuse = None
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    (request_id,) = provisioner.submitted
    driver.worker_attached(_attached(request_id))
    profile = driver.view()[0]["profiles"][0]
    assert profile["last_error"] is None and profile["failures"] == 0
    await driver.close()


async def test_recovered_requests_are_outstanding_and_timed_out_from_submission() -> None:
    driver, provisioner, engine = _driver(provision_timeout_s=0.3)
    provisioner.jobs["77"] = JobStatus(JobState.PENDING, "PENDING", "Resources")
    # Submitted 0.2 s before the engine started again: 0.1 s of its timeout are left.
    recovered = Request(
        "r1", "box", "small", created_at=time.time() - 0.2, job_id="77", token_jti="jti-r1"
    )
    gone = Request("r2", "removed", "profile", created_at=0, job_id="5", token_jti="jti-r2")
    driver.recover([recovered, gone])
    assert engine.revoked == ["jti-r2"]
    driver.want("box", "small")
    assert provisioner.submitted == []  # the recovered job is the outstanding one
    await async_wait_for(lambda: provisioner.cancelled, timeout=5, what="the timeout")
    assert provisioner.cancelled == ["77"] and "jti-r1" in engine.revoked
    assert "did not attach within 0.3 s" in str(driver.view()[0]["profiles"][0]["last_error"])
    await driver.close()
