"""The dispatcher with provisioners and batch jobs, in-process on a clock the test moves:
a call for a profile brings one machine, bursts spread over max_workers, a machine that
never attaches is cancelled, and calls go only where their limit fits before the job
ends."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord, encode
from fluksio.engine.provisioning import Configured
from fluksio.provisioners import WorkerRecord, hookimpl
from fluksio.provisioners.base import JobState, JobStatus
from fluksio.provisioners.plugins import build_plugins
from tests.support.clock import ManualClock
from tests.support.inprocess import (
    ClientFactory,
    InProcessEngine,
    start_in_process,
)
from tests.support.scripted import Scripted, scripted_settings
from tests.support.wait import async_wait_for, poll_async

NODE = "def process():\n    return 1\n"


# -- provisioning, on a clock the test advances ----------------------------------------------


class Listener:
    """A plugin that provisions nothing and hears of every worker."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str]] = []

    @hookimpl
    def fluksio_worker_attached(self, worker: WorkerRecord) -> None:
        self.heard.append(("attached", worker.name))

    @hookimpl
    def fluksio_worker_gone(self, worker: WorkerRecord) -> None:
        self.heard.append(("gone", worker.name))


@pytest.fixture
async def provisioned(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> tuple[InProcessEngine, Scripted, ManualClock, Listener]:
    return await _provisioned(aiohttp_client, tmp_path)


async def _provisioned(
    aiohttp_client: ClientFactory, tmp_path: Path, **settings: Any
) -> tuple[InProcessEngine, Scripted, ManualClock, Listener]:
    plugins = build_plugins()
    listener = Listener()
    plugins.manager.register(listener, name="listener")
    settings = {"provision_timeout_s": 600, "retry_base_s": 30, **settings}
    provisioner = Scripted(scripted_settings(**settings))
    clock = ManualClock()
    api = await start_in_process(
        aiohttp_client,
        tmp_path / "data",
        provisioners=Configured(plugins, [provisioner]),
        clock=clock,
    )
    return api, provisioner, clock, listener


async def test_a_call_for_a_profile_brings_one_machine_whose_worker_runs_it(
    provisioned: tuple[InProcessEngine, Scripted, ManualClock, Listener],
) -> None:
    api, provisioner, clock, listener = provisioned
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    runs = [await api.start_run("hpc") for _ in range(3)]
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")
    assert len(provisioner.submitted) == 1, "one request however many calls wait"
    assert await api.first_queued_reason() == "provisioning box/small, job 100 submitted"
    clock.advance(5)

    async def polled() -> bool:
        return (
            await api.first_queued_reason() == "provisioning box/small, job 100 PENDING (Priority)"
        )

    await poll_async(polled, timeout=5, what="the poll's state in the reason")
    profile = (await api.request("GET", "/workers/resources")).body["provisioners"][0]
    assert profile["type"] == "scripted"
    assert profile["profiles"][0]["outstanding"]["state"] == "PENDING"

    provisioner.jobs["100"] = JobStatus(JobState.RUNNING, "RUNNING")
    (token,) = provisioner.tokens
    worker = await api.attach(token, name="box-small", labels=["hpc"], parallel=3)
    assert worker.greeting["op"] == "welcome"
    for _ in runs:
        call = await worker.next_call()
        await worker.answer(call["call_id"], "done")
    for run in runs:
        ended = await api.wait_run(run["id"])
        assert ended["state"] == "succeeded"
        # Which job it ran in, in the provisioner's words, kept with the result.
        assert ended["nodes"][0]["provenance"]["batch_job"] == "job 100"
    (listed,) = (await api.request("GET", "/workers")).body
    assert listed["batch_job"] == "job 100"
    (profile,) = (await api.request("GET", "/workers/resources")).body["provisioners"][0][
        "profiles"
    ]
    assert profile["outstanding"] is None and profile["last_error"] is None
    assert [(w["name"], w["job_id"]) for w in profile["workers"]] == [("box-small", "100")]
    await worker.close()
    await async_wait_for(lambda: len(listener.heard) == 2, timeout=5, what="both events")
    assert listener.heard == [("attached", "box-small"), ("gone", "box-small")]


async def _settle_passes() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_job_that_ends_while_calls_wait_frees_its_slot_for_the_next_job(
    provisioned: tuple[InProcessEngine, Scripted, ManualClock, Listener],
) -> None:
    # max_workers 1: the waiting call cannot bring a second job beside the first. Once the
    # first has ended (its worker drained, then the poll says so), a pass asks at once;
    # nothing else has to happen for the call to get its job.
    api, provisioner, clock, _listener = provisioned
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    first = await api.start_run("hpc")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")
    (token,) = provisioner.tokens
    worker = await api.attach(token, name="box-small", labels=["hpc"])
    call = await worker.next_call()
    await worker.answer(call["call_id"], "done")
    assert (await api.wait_run(first["id"]))["state"] == "succeeded"
    await worker.close()  # as a drained worker leaves; its job has yet to end
    await async_wait_for(lambda: not api.engine.workers.attached(), timeout=5, what="it to go")
    second = await api.start_run("hpc")
    await _settle_passes()
    assert len(provisioner.submitted) == 1, "its job is still alive: no second beside it"
    provisioner.jobs["100"] = JobStatus(JobState.COMPLETED, "COMPLETED")
    clock.advance(1)  # polled a second after its worker left
    await async_wait_for(
        lambda: len(provisioner.submitted) == 2, timeout=5, what="the next job, at once"
    )
    worker = await api.attach(provisioner.tokens[1], name="box-small", labels=["hpc"])
    call = await worker.next_call()
    await worker.answer(call["call_id"], "done")
    assert (await api.wait_run(second["id"]))["state"] == "succeeded"


async def test_a_burst_spreads_over_max_workers_jobs_one_pending_at_a_time(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    profiles = [{"name": "small", "labels": ["hpc"], "max_workers": 3}]
    api, provisioner, _clock, _listener = await _provisioned(
        aiohttp_client, tmp_path, profiles=profiles
    )
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    runs = [await api.start_run("hpc") for _ in range(6)]
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")
    workers = []
    for attached in range(1, 4):
        assert len(provisioner.submitted) == attached, "one pending at a time"
        token = provisioner.tokens[attached - 1]
        workers.append(await api.attach(token, name=f"box-small-{attached}", labels=["hpc"]))
        await workers[-1].next_call()
        if attached < 3:  # calls still wait: the next job goes out
            submitted = attached + 1
            await async_wait_for(
                lambda: len(provisioner.submitted) == submitted,  # noqa: B023 (awaited here)
                timeout=5,
                what=f"job {attached + 1}",
            )
            expected = (
                f"provisioning box/small, {attached} of 3 jobs running,"
                f" job {100 + attached} submitted"
            )
            assert await api.first_queued_reason() == expected
    answered = 0
    while answered < len(runs):
        for worker in workers:
            call = await worker.next_call()
            await worker.answer(call["call_id"], "done")
            answered += 1
            if answered == len(runs):
                break
    for run in runs:
        assert (await api.wait_run(run["id"]))["state"] == "succeeded"
    # Every pass since the third attached (one per answer) left it at three.
    assert len(provisioner.submitted) == 3, "max_workers reached"
    (profile,) = (await api.request("GET", "/workers/resources")).body["provisioners"][0][
        "profiles"
    ]
    assert profile["max_workers"] == 3 and len(profile["workers"]) == 3
    assert profile["jobs_by_stage"] == {"attached": 3}


async def test_a_machine_that_never_attaches_is_cancelled_and_the_profile_rests(
    provisioned: tuple[InProcessEngine, Scripted, ManualClock, Listener],
) -> None:
    api, provisioner, clock, _listener = provisioned
    await api.put_flow("hpc", [{"id": "n", "code": NODE, "worker": "hpc"}])
    await api.start_run("hpc")
    await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")
    clock.advance(600)
    await async_wait_for(lambda: provisioner.cancelled, timeout=5, what="the cancel")
    assert provisioner.cancelled == ["100"]

    async def resting() -> str | None:
        reason = await api.first_queued_reason()
        return reason if reason and "trying again" in reason else None

    reason = await poll_async(resting, timeout=5, what="the failure in the reason")
    assert reason == (
        "provisioning box/small, the last attempt failed (job 100 did not attach within"
        " 600 s; cancelled); trying again in 30 s"
    )
    clock.advance(30)
    await async_wait_for(
        lambda: len(provisioner.submitted) == 2, timeout=5, what="the second attempt"
    )
    tokens = (await api.request("GET", "/workers/tokens")).body
    statuses: dict[str, Any] = {t["jti"]: t["status"] for t in tokens}
    assert sorted(statuses.values()) == ["active", "revoked"], "the first job's token is dead"


# -- walltime ------------------------------------------------------------------------------


async def test_calls_go_only_where_their_limit_fits_before_the_job_ends(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", walltime_margin_s=60)
    token = await api.mint("hpc-small", ["hpc"])
    worker = await api.attach(
        token, name="n1", labels=["hpc"], parallel=4, ends_at=time.time() + 1800
    )
    short = {"id": "short", "worker": "hpc", "limit": 20, "code": NODE}
    long = {"id": "long", "worker": "hpc", "limit": 7200, "code": NODE}
    await api.put_flow("walltime", [short, long])
    run = await api.start_run("walltime")
    call = await worker.next_call()
    assert call["node"] == "short" and call["limit"] == 20
    await worker.answer(call["call_id"], "done")

    async def waiting() -> str | None:
        nodes = {n["id"]: n for n in (await api.run(run["id"]))["nodes"]}
        if nodes["short"]["state"] != "succeeded":
            return None
        reason: str = nodes["long"]["reason"]
        return reason

    reason = await poll_async(waiting, timeout=5, what="the short call to finish")
    assert re.fullmatch(
        r"needs up to 7200 s \(\+60 s to spare\); hpc-small/n1's job ends in 1[78]\d\d s",
        reason,
    ), reason
    assert len(worker.calls) == 1, "nothing else was sent to the worker"
    listed = (await api.request("GET", "/workers")).body
    assert listed[0]["ends_at"] is not None


async def test_a_node_without_a_limit_runs_in_the_job_until_its_margin_and_says_so(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """The user documentation's own node sets only a silence timeout: it runs where jobs
    end, with the time left less the margin as its limit, and the failure names the job
    (once no run on another job is left: ``max_checkpoints`` 0 here)."""
    api = await start_in_process(aiohttp_client, tmp_path / "data", walltime_margin_s=60)
    token = await api.mint("hpc-small", ["gpu"])
    ends_at = time.time() + 1800
    worker = await api.attach(
        token, name="n1", labels=["gpu"], slurm_job_id="41", ends_at=ends_at, parallel=2
    )
    train = {"id": "train", "worker": "gpu", "worker_policy": "require", "timeout": 7200}
    await api.put_flow("spec", [{**train, "code": NODE, "max_checkpoints": 0}])
    run = await api.start_run("spec")
    call = await worker.next_call()
    assert call["node"] == "train" and call["timeout"] == 7200
    assert 1730 <= call["limit"] <= 1740, "the time left in the job, less the margin"
    assert call["until_job_end"] is True, call
    # Our agent stops it at that limit and says NodeLimit, as for any limit.
    stopped = AnswerFrame(
        call_id=call["call_id"], ok=False, error=ErrorRecord(type="NodeLimit", message="x")
    )
    await worker.send_raw(encode(stopped))
    ended = await api.wait_run(run["id"])
    (node,) = ended["nodes"]
    assert node["state"] == "failed"
    assert node["error"]["type"] == "NodeLimit"
    assert node["error"]["message"] == (
        'ran until Slurm job 41 had 60 s left; give the node a "limit" to be placed where it fits'
        " (stopped so 1 time; its max_checkpoints is 0)"
    )


async def test_saving_a_node_without_a_limit_for_ending_profiles_warns_and_saves(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    profiles = [
        {"name": "gpu-small", "labels": ["gpu"], "walltime_s": 4 * 3600},
        {"name": "box", "labels": ["cpu"]},
    ]
    api, _provisioner, _clock, _listener = await _provisioned(
        aiohttp_client, tmp_path, profiles=profiles
    )
    train = {"id": "train", "worker": "gpu", "worker_policy": "require", "timeout": 7200}
    nodes: list[dict[str, Any]] = [
        {**train, "code": NODE},
        {"id": "bounded", "worker": "gpu", "limit": 600, "code": NODE},
        {"id": "lasting", "worker": "cpu", "code": NODE},
    ]
    saved = await api.put_flow("spec", nodes)
    assert saved.status == 201, "a warning, never a refusal"
    assert saved.body["warnings"] == [
        "node 'train' sets no limit, and every profile with 'gpu' brings a job that ends"
        " (box/gpu-small after 04:00:00, told 120 s before): it is stopped when its job has"
        ' 60 s left; give it a "limit" to be placed where it fits'
    ]
    fixed = await api.put_flow("spec", [{**nodes[0], "limit": 3600}, *nodes[1:]])
    assert fixed.status == 200 and fixed.body["warnings"] == []


@pytest.mark.parametrize(
    ("walltime_s", "told"),
    [
        (120, "box/short after 00:02:00, told 30 s before"),
        (60, "box/short after 00:01:00, no longer than the 60 s margin and its 15 s notice"),
    ],
)
async def test_a_short_jobs_notice_fits_it_so_a_call_without_a_limit_is_provisioned(
    aiohttp_client: ClientFactory, tmp_path: Path, walltime_s: int, told: str
) -> None:
    # Before, the 120 s notice outlasted a two-minute job: such a call waited for ever.
    profiles = [{"name": "short", "labels": ["hpc"], "walltime_s": walltime_s}]
    api, provisioner, _clock, _listener = await _provisioned(
        aiohttp_client, tmp_path, profiles=profiles
    )
    saved = await api.put_flow("short", [{"id": "n", "code": NODE, "worker": "hpc"}])
    (warning,) = saved.body["warnings"]
    assert told in warning
    await api.start_run("short")
    if walltime_s == 120:
        await async_wait_for(lambda: provisioner.submitted, timeout=5, what="a submission")
        return
    assert "lower the engine's --walltime-margin-s" in warning
    reason = await api.first_queued_reason()
    assert reason is not None and "within its 60 s margin and the 15 s notice" in reason
    assert provisioner.submitted == []


async def test_an_idle_worker_near_its_job_end_is_drained_with_4010(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    api = await start_in_process(
        aiohttp_client, tmp_path / "data", walltime_margin_s=60, clock=clock
    )
    token = await api.mint("hpc-small", ["hpc"])
    ending = await api.attach(token, name="ending", labels=["hpc"], ends_at=clock.now() + 100)
    lasting = await api.attach(token, name="lasting", labels=["hpc"], ends_at=clock.now() + 900)

    async def listed() -> list[str]:
        return [w["name"] for w in (await api.request("GET", "/workers")).body]

    clock.advance(30)  # 70 s left: it may still take a call of up to 10 s
    await api.seen_silent("hpc-small/ending")  # the watch has looked
    assert await listed() == ["hpc-small/ending", "hpc-small/lasting"]
    clock.advance(15)  # 55 s left: nothing fits in it any more
    await async_wait_for(lambda: ending.socket.closed, timeout=5, what="the drain")
    assert ending.socket.close_code == 4010
    assert not lasting.socket.closed
    assert await listed() == ["hpc-small/lasting"]
