"""The provisioning driver's rules, in one process, on a clock the test advances.

The provisioner's outside system is a dict; time passes only when a test says so, so
timeouts, polls and the backoff are asserted to the second without waiting for them. The
Slurm and local tests show the same rules end to end; these also pin the orderings a
real cluster cannot be made to produce on demand (a worker attaching before the
submission's answer arrives).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog.testing

from fluksio.provisioners.base import JobState, JobStatus, WorkerRecord
from fluksio.provisioners.driver import ProvisioningDriver
from fluksio.provisioners.machine.requests import MachineRequest, RequestStage
from tests.support.clock import ManualClock
from tests.support.scripted import RecordingEngine as Engine
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for


def _driver(**settings: Any) -> tuple[ProvisioningDriver, Scripted, Engine, ManualClock]:
    provisioner = Scripted(scripted_settings(**settings))
    engine, clock = Engine(), ManualClock()
    driver = ProvisioningDriver([provisioner], engine, on_change=engine.changed, clock=clock)
    return driver, provisioner, engine, clock


@dataclass(frozen=True)
class Stands:
    """How a profile stands, as these tests read it: the driver's view of its request
    under way, and what the driver tells the scheduler (``outstanding``, ``said``)."""

    stage: RequestStage | None
    job_id: str | None
    status: str | None
    """The outside system's words for the request under way: ``PENDING (Priority)``."""
    last_error: str | None
    retry_at: float | None
    login_needed: str | None
    jobs: int
    attached: int
    outstanding: bool
    said: str | None


def _state(driver: ProvisioningDriver, profile: str = "small") -> Stands:
    (told,) = [p.provisioning for p in driver.scheduler_profiles() if p.name == profile]
    (shown,) = [p for p in driver.profiles() if p.profile.name == profile]
    request = shown.outstanding
    return Stands(
        stage=request.stage if request is not None else None,
        job_id=request.job_id if request is not None else None,
        status=request.status.describe() if request is not None and request.status else None,
        last_error=shown.last_error[1] if shown.last_error else None,
        retry_at=shown.retry_at,
        login_needed=shown.login_needed,
        jobs=len(shown.jobs),
        attached=sum(job.stage is RequestStage.ATTACHED for job in shown.jobs),
        outstanding=told.outstanding,
        said=told.said,
    )


def _attached(request_id: str) -> WorkerRecord:
    return WorkerRecord("w1", "box-small", ("hpc",), "box", "small", request_id, None)


async def _settle() -> None:
    """Let the driver's submissions, polls and cancels (tasks on the loop) run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_asked_again_and_again_it_submits_once_and_polls_on_the_interval() -> None:
    driver, provisioner, engine, clock = _driver()
    for _ in range(50):
        driver.want("box", "small")
    assert _state(driver).stage is RequestStage.SUBMITTING and _state(driver).outstanding
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    for _ in range(50):
        driver.want("box", "small")
    await _settle()
    assert len(provisioner.submitted) == 1
    queued = _state(driver)
    assert (queued.stage, queued.job_id, queued.status, queued.jobs) == (
        RequestStage.QUEUED,
        "100",
        None,
        1,
    )
    assert queued.said == "job 100 submitted"
    clock.advance(4.9)
    await _settle()
    assert provisioner.polls == 0, "not before the interval"
    clock.advance(0.1)
    await _settle()
    assert provisioner.polls == 1
    assert _state(driver).status == "PENDING (Priority)"
    assert _state(driver).said == "job 100 PENDING (Priority)"
    provisioner.jobs["100"] = JobStatus(JobState.RUNNING, "RUNNING")
    clock.advance(5)
    await _settle()
    assert _state(driver).stage is RequestStage.STARTED
    assert _state(driver).said == "job 100 RUNNING, waiting for its worker to attach"
    assert engine.changes >= 4, "every change was told"
    await driver.close()
    assert provisioner.cancelled == ["100"]


async def test_a_worker_attaching_before_the_submissions_answer_stays_attached() -> None:
    profiles = [{"name": "small", "labels": ["hpc"]}, {"name": "later", "labels": ["x"]}]
    driver, provisioner, engine, clock = _driver(provision_timeout_s=60, profiles=profiles)
    provisioner.gate.clear()
    driver.want("box", "small")  # the request is listed at once, submitting
    (request_id,) = [job.id for p in driver.profiles() for job in p.jobs]
    driver.worker_attached(_attached(request_id))
    provisioner.gate.set()
    await async_wait_for(lambda: engine.stored, timeout=5, what="the request to be stored")
    assert engine.stored[request_id].stage is RequestStage.ATTACHED
    clock.advance(30)
    driver.want("box", "later")  # its worker never comes
    await _settle()
    clock.advance(59)
    await _settle()
    assert provisioner.cancelled == [], "the attached one is not timed out; the later not yet"
    clock.advance(1)
    await _settle()
    assert provisioner.cancelled == ["101"]
    assert engine.revoked == [f"jti-{r}" for r in provisioner.submitted[1:]]
    (small, _later) = driver.profiles()
    assert small.outstanding is None and small.workers[0].job_id == "100"
    assert _state(driver, "later").last_error == "job 101 did not attach within 60 s; cancelled"
    await driver.close()
    assert provisioner.cancelled == ["101"]  # an attached worker's job outlives the engine


async def test_failures_rest_the_profile_doubling_up_to_the_cap() -> None:
    driver, provisioner, _engine, clock = _driver(retry_base_s=10, retry_max_s=30)
    provisioner.refuse = "sbatch refused the job: no"
    rests = []
    for _ in range(4):
        driver.want("box", "small")
        await _settle()
        state = _state(driver)
        assert state.last_error == "sbatch refused the job: no" and state.outstanding
        assert state.retry_at is not None
        rests.append(state.retry_at - clock.now())
        driver.want("box", "small")  # resting: not asked again
        await _settle()
        clock.advance(rests[-1])
        assert not _state(driver).outstanding, "rested: the next pass may ask again"
    assert rests == [10, 20, 30, 30]
    assert len(provisioner.submitted) == 0
    provisioner.refuse = None
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    (request_id,) = provisioner.submitted
    driver.worker_attached(_attached(request_id))
    (status,) = driver.profiles()
    assert status.last_error is None and status.failures == 0
    await driver.close()


async def test_a_login_needed_waits_for_a_person_without_backoff_or_tokens() -> None:
    driver, provisioner, engine, clock = _driver(retry_base_s=10)
    provisioner.logged_out = True
    driver.want("box", "small")
    await _settle()
    state = _state(driver)
    assert state.login_needed == "login needed: run 'fluksio provisioners login box'"
    assert state.stage is None and state.last_error is None, "not a failure"
    assert state.retry_at == clock.now() + 5, "looked at again after one poll interval"
    (status,) = driver.profiles()
    assert status.failures == 0 and status.login_needed == state.login_needed
    minted = len(engine.revoked)
    with structlog.testing.capture_logs() as logged:
        for _ in range(3):  # each rest ends, the next pass asks, nobody has logged in yet
            clock.advance(5)
            driver.want("box", "small")
            await _settle()
    assert logged == [], "waiting for a person fills no log, one line per rest"
    assert provisioner.login_checks == 3, "asked the provisioner, locally, once per rest"
    assert len(engine.revoked) == minted, "no token is minted while nobody can log in"
    assert _state(driver).retry_at == clock.now() + 5, "the rest does not double"
    provisioner.logged_out = False  # someone ran 'fluksio provisioners login box'
    clock.advance(5)
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    assert _state(driver).login_needed is None
    assert _state(driver).stage is RequestStage.QUEUED
    provisioner.logged_out = True  # the shared connection closed while the job is queued
    clock.advance(5)
    await _settle()
    assert _state(driver).login_needed == "login needed: run 'fluksio provisioners login box'"
    assert _state(driver).stage is RequestStage.QUEUED, "the job is still watched"
    provisioner.logged_out = False
    clock.advance(5)
    await _settle()
    assert _state(driver).login_needed is None
    await driver.close()


async def test_a_job_that_leaves_before_its_worker_attached_fails_at_the_next_poll() -> None:
    driver, provisioner, engine, clock = _driver()
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    provisioner.jobs["100"] = JobStatus(JobState.FAILED, "FAILED", "NonZeroExitCode")
    clock.advance(5)
    await _settle()
    state = _state(driver)
    assert state.stage is None and state.retry_at == clock.now() + 10
    assert state.last_error == "job 100 ended FAILED (NonZeroExitCode) before its worker attached"
    assert engine.revoked == [f"jti-{provisioner.submitted[0]}"] and engine.stored == {}
    # Its worker never read what the submission left for it (a token file): cleaned up.
    assert provisioner.cleaned == provisioner.submitted
    await driver.close()


async def test_a_failed_poll_is_the_last_error_and_polling_goes_on() -> None:
    driver, provisioner, _engine, clock = _driver()
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    provisioner.poll_error = "squeue: slurm_load_jobs error: Unable to contact slurm controller"
    clock.advance(5)
    await _settle()
    assert _state(driver).last_error == f"polling failed: {provisioner.poll_error}"
    assert _state(driver).stage is RequestStage.QUEUED, "a failed poll ends nothing"
    provisioner.poll_error = None
    clock.advance(5)
    await _settle()
    assert provisioner.polls == 2 and _state(driver).status == "PENDING (Priority)"
    await driver.close()


async def test_recovered_requests_are_outstanding_and_timed_out_from_submission() -> None:
    driver, provisioner, engine, clock = _driver(provision_timeout_s=300)
    provisioner.jobs["77"] = JobStatus(JobState.PENDING, "PENDING", "Resources")
    # Submitted 200 s before the engine started again: 100 s of its timeout are left.
    recovered = MachineRequest(
        "r1",
        "box",
        "small",
        created_at=clock.now() - 200,
        stage=RequestStage.QUEUED,
        job_id="77",
        token_jti="jti-r1",
    )
    gone = MachineRequest("r2", "removed", "profile", created_at=0, job_id="5", token_jti="jti-r2")
    driver.recover([recovered, gone])
    assert engine.revoked == ["jti-r2"]
    driver.want("box", "small")
    await _settle()
    assert provisioner.submitted == []  # the recovered job is the outstanding one
    clock.advance(99)
    await _settle()
    assert provisioner.cancelled == []
    clock.advance(1)
    await _settle()
    assert provisioner.cancelled == ["77"] and "jti-r1" in engine.revoked
    assert "did not attach within 300 s" in str(_state(driver).last_error)
    await driver.close()


async def test_a_request_is_written_down_before_it_is_submitted() -> None:
    driver, provisioner, engine, _clock = _driver()
    provisioner.gate.clear()
    driver.want("box", "small")
    await _settle()
    ((request_id, job_id, stage),) = engine.written
    assert (job_id, stage) == (None, RequestStage.SUBMITTING) and not provisioner.submitted
    provisioner.gate.set()
    await async_wait_for(lambda: len(engine.written) == 2, timeout=5, what="the job id stored")
    assert engine.written[1] == (request_id, "100", RequestStage.QUEUED)
    await driver.close()


async def test_a_lost_answer_is_looked_for_by_its_mark_and_adopted_not_sent_again() -> None:
    driver, provisioner, engine, clock = _driver()
    provisioner.lose_answer = True
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    await _settle()
    for _ in range(10):
        driver.want("box", "small")
    await _settle()
    assert len(provisioner.submitted) == 1, "not submitted again while it may exist"
    state = _state(driver)
    assert state.stage is RequestStage.SUBMITTING and state.job_id is None
    assert state.said == (
        "submitting a job: its answer was lost (sbatch did not answer within 60 s); looking"
        " for the job by its mark"
    )
    clock.advance(5)
    await _settle()
    # Found at the poll, and polled in the same round like any other job.
    found = _state(driver)
    assert (found.stage, found.job_id, found.status, found.jobs) == (
        RequestStage.QUEUED,
        "100",
        "PENDING (Priority)",
        1,
    )
    (request_id,) = provisioner.submitted
    assert engine.written[-1] == (request_id, "100", RequestStage.QUEUED)
    assert len(provisioner.submitted) == 1 and provisioner.cancelled == []
    await driver.close()


async def test_a_lost_answer_that_left_no_job_counts_as_never_submitted() -> None:
    driver, provisioner, engine, clock = _driver(retry_base_s=10)
    provisioner.lose_answer = True
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    provisioner.jobs.clear()  # sbatch hung and then failed: no job carries the mark
    clock.advance(5)
    await _settle()
    (request_id,) = provisioner.submitted
    assert provisioner.cancelled == [None] and provisioner.cleaned == [request_id]
    state = _state(driver)
    assert state.stage is None and state.retry_at == clock.now() + 10
    assert state.last_error == (
        "sbatch did not answer within 60 s; no job of it was found, submitting again"
    )
    assert engine.revoked == [f"jti-{request_id}"] and engine.stored == {}
    clock.advance(10)
    driver.want("box", "small")
    await async_wait_for(lambda: len(provisioner.submitted) == 2, timeout=5, what="a resubmit")
    await driver.close()


async def test_a_lost_job_unseen_until_the_timeout_is_found_and_cancelled_then() -> None:
    driver, provisioner, _engine, clock = _driver(provision_timeout_s=30, poll_interval_s=20)
    provisioner.lose_answer = True
    provisioner.find_error = "squeue: Unable to contact slurm controller"
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the submission")
    clock.advance(20)
    await _settle()
    assert _state(driver).last_error == f"looking for a job failed: {provisioner.find_error}"
    assert _state(driver).stage is RequestStage.SUBMITTING, "unseen is not 'not there'"
    provisioner.find_error = None
    clock.advance(10)  # the timeout, before the next poll
    await _settle()
    assert provisioner.cancelled == ["100"], "found at the last look, and cancelled"
    assert provisioner.jobs == {}
    assert "the job did not attach within 30 s; cancelled" in str(_state(driver).last_error)
    await driver.close()


async def test_an_engine_killed_mid_submission_finds_the_job_and_submits_none() -> None:
    driver, provisioner, engine, clock = _driver()
    provisioner.jobs["77"] = JobStatus(JobState.PENDING, "PENDING", "Resources")
    provisioner.marks["r1"] = "77"
    unanswered = MachineRequest("r1", "box", "small", created_at=clock.now() - 3, token_jti="j")
    driver.recover([unanswered])
    driver.want("box", "small")
    await _settle()
    assert provisioner.submitted == []
    assert "engine stopped before the submission answered" in str(_state(driver).said)
    clock.advance(5)
    await _settle()
    found = _state(driver)
    assert (found.stage, found.job_id, found.status, found.jobs) == (
        RequestStage.QUEUED,
        "77",
        "PENDING (Resources)",
        1,
    )
    assert engine.written[-1] == ("r1", "77", RequestStage.QUEUED)
    await driver.close()
    assert provisioner.cancelled == ["77"] and provisioner.cleaned == ["r1"]


async def test_up_to_max_workers_jobs_one_pending_at_a_time() -> None:
    driver, provisioner, _engine, clock = _driver(
        profiles=[{"name": "small", "labels": ["hpc"], "max_workers": 2}]
    )
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the first job")
    driver.want("box", "small")
    await _settle()
    assert len(provisioner.submitted) == 1, "the first is still pending"
    driver.worker_attached(_attached(provisioner.submitted[0]))
    assert _state(driver).jobs == 1 and _state(driver).attached == 1
    driver.want("box", "small")
    await async_wait_for(lambda: len(provisioner.submitted) == 2, timeout=5, what="the second job")
    driver.worker_attached(_attached(provisioner.submitted[1]))
    driver.want("box", "small")
    await _settle()
    assert len(provisioner.submitted) == 2, "max_workers reached"
    assert (_state(driver).jobs, _state(driver).attached) == (2, 2)
    # A job that ends makes room again.
    provisioner.jobs["100"] = JobStatus(JobState.COMPLETED, "COMPLETED")
    clock.advance(5)
    await _settle()
    assert _state(driver).jobs == 1
    driver.want("box", "small")
    await async_wait_for(lambda: len(provisioner.submitted) == 3, timeout=5, what="a third")
    await driver.close()


async def test_a_worker_near_its_job_end_holds_its_slot_until_its_job_ends() -> None:
    # max_workers is a cap at every instant: a job counts until it is known to have ended,
    # however soon it ends. Its replacement goes out once it has (polled at once after its
    # worker leaves), never beside it.
    driver, provisioner, _engine, clock = _driver(poll_interval_s=30)
    driver.want("box", "small")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="the first job")
    (request_id,) = provisioner.submitted
    ends = WorkerRecord(
        "w1", "box-small", ("hpc",), "box", "small", request_id, "100", time.time() + 40
    )
    driver.worker_attached(ends)
    for _ in range(3):
        clock.advance(15)
        driver.want("box", "small")
        await _settle()
    assert len(provisioner.submitted) == 1, "max_workers 1: no replacement beside it"
    assert _state(driver).jobs == 1
    driver.worker_gone(ends)  # drained: the agent exits, then its job ends
    provisioner.jobs["100"] = JobStatus(JobState.COMPLETED, "COMPLETED")
    polls = provisioner.polls
    clock.advance(1)
    await _settle()
    assert provisioner.polls == polls + 1, "polled a second after its worker left"
    assert _state(driver).jobs == 0
    driver.want("box", "small")
    await async_wait_for(lambda: len(provisioner.submitted) == 2, timeout=5, what="the replacement")
    await driver.close()
