"""Rule 7 of a pass, one table row each: a call lands only where its limit fits before its
job ends; one without a limit goes where the most time is left, never inside the margin;
a call no job outlives asks for a profile whose walltime fits, or says why none can."""

from __future__ import annotations

from dataclasses import replace

from fluksio.scheduler import (
    CallRequest,
    Profile,
    Scheduler,
    WaitKind,
    WaitReason,
)
from tests.support.scheduling import ENGINE, worker

NOW = 50_000.0


def test_a_call_lands_only_where_its_limit_fits_before_the_job_ends() -> None:
    scheduler = Scheduler(ENGINE, walltime_margin_s=60)
    scheduler.add_worker(replace(worker("hpc-1", "hpc", slots=4), ends_at=NOW + 1800))
    scheduler.submit(CallRequest("short", 1.0, label="hpc", limit=20))
    scheduler.submit(CallRequest("long", 2.0, label="hpc", limit=7200))
    scheduler.submit(CallRequest("just", 4.0, label="hpc", limit=1740))
    scheduler.submit(CallRequest("over", 5.0, label="hpc", limit=1741))
    plan = scheduler.schedule(NOW)
    assert sorted(p.request_id for p in plan.placements) == ["just", "short"]
    assert all(p.job_limit is None for p in plan.placements), "their own limit stands"
    assert plan.holds == {}, "a place too near its end holds nothing for it"
    long = scheduler.reason("long")
    assert long == WaitReason(
        WaitKind.WALLTIME, "needs up to 7200 s (+60 s to spare); hpc-1's job ends in 1800 s"
    )
    # Later, less is left: what fitted at first may not.
    scheduler.submit(CallRequest("late", 6.0, label="hpc", limit=1000))
    assert [p.request_id for p in scheduler.schedule(NOW + 1000).placements] == []


def test_a_call_without_a_limit_runs_where_jobs_end_until_the_margin() -> None:
    """The user documentation's own node sets no limit: it runs in a job, and the job's end
    less the margin is its limit."""
    scheduler = Scheduler(ENGINE, walltime_margin_s=60)
    scheduler.add_worker(replace(worker("hpc-1", "hpc", slots=4), ends_at=NOW + 1800))
    scheduler.submit(CallRequest("untimed", 1.0, label="hpc"))
    (placed,) = scheduler.schedule(NOW).placements
    assert (placed.request_id, placed.worker_id, placed.job_limit) == ("untimed", "hpc-1", 1740)


def test_a_call_without_a_limit_goes_where_most_time_is_left() -> None:
    scheduler = Scheduler(ENGINE, walltime_margin_s=60)
    # Best fit alone would pick the smallest, "soon"; time left picks "later".
    scheduler.add_worker(replace(worker("soon", "hpc", slots=1), ends_at=NOW + 600))
    scheduler.add_worker(replace(worker("later", "hpc", slots=4), ends_at=NOW + 3600))
    scheduler.submit(CallRequest("untimed", 1.0, label="hpc"))
    scheduler.submit(CallRequest("timed", 2.0, label="hpc", limit=60))
    plan = scheduler.schedule(NOW)
    where = {p.request_id: (p.worker_id, p.job_limit) for p in plan.placements}
    assert where == {"untimed": ("later", 3540), "timed": ("soon", None)}
    # A worker whose job never ends has the most time of all, and gives no limit.
    scheduler.add_worker(worker("box", "hpc", slots=1))
    scheduler.submit(CallRequest("untimed-2", 3.0, label="hpc"))
    (placed,) = scheduler.schedule(NOW).placements
    assert (placed.worker_id, placed.job_limit) == ("box", None)


def test_a_call_without_a_limit_never_goes_to_a_worker_inside_its_margin() -> None:
    profiles = [Profile("hpc", "small", frozenset({"hpc"}), cpus=1, walltime_s=4 * 3600)]
    scheduler = Scheduler(ENGINE, profiles=profiles, walltime_margin_s=60)
    scheduler.add_worker(replace(worker("draining", "hpc", slots=4), ends_at=NOW + 60))
    scheduler.submit(CallRequest("untimed", 1.0, label="hpc"))
    plan = scheduler.schedule(NOW)
    assert plan.placements == () and plan.holds == {}
    assert [(a.profile, a.request_id) for a in plan.asks] == [("small", "untimed")]


def test_a_call_that_no_job_outlives_asks_for_a_profile_whose_walltime_fits() -> None:
    profiles = [
        Profile("hpc", "short", frozenset({"hpc"}), cpus=1, walltime_s=3600),
        Profile("hpc", "long", frozenset({"hpc"}), cpus=2, walltime_s=4 * 3600),
    ]
    scheduler = Scheduler(ENGINE, profiles=profiles, walltime_margin_s=60)
    scheduler.add_worker(replace(worker("hpc-1", "hpc", slots=4), ends_at=NOW + 1800))
    scheduler.submit(CallRequest("two-hours", 1.0, label="hpc", limit=7200))
    scheduler.submit(CallRequest("ten-minutes", 2.0, label="hpc", limit=600))
    plan = scheduler.schedule(NOW)
    assert [p.request_id for p in plan.placements] == ["ten-minutes"]
    assert [(a.profile, a.request_id) for a in plan.asks] == [("long", "two-hours")]
    two_hours = scheduler.reason("two-hours")
    assert two_hours is not None and two_hours.kind is WaitKind.PROVISIONING


def test_with_nothing_attached_a_call_without_a_limit_asks_for_its_profile() -> None:
    """The spec's example: a node with no limit bound to gpu-small (--time=04:00:00)."""
    profiles = [Profile("hpc", "gpu-small", frozenset({"gpu"}), cpus=8, walltime_s=4 * 3600)]
    scheduler = Scheduler(ENGINE, profiles=profiles, walltime_margin_s=60)
    scheduler.submit(CallRequest("train", 1.0, label="gpu"))
    plan = scheduler.schedule(NOW)
    assert [(a.profile, a.request_id) for a in plan.asks] == [("gpu-small", "train")]
    reason = scheduler.reason("train")
    assert reason is not None and reason.kind is WaitKind.PROVISIONING


def test_with_no_worker_a_call_longer_than_any_profiles_walltime_says_so() -> None:
    profiles = [Profile("hpc", "short", frozenset({"hpc"}), cpus=1, walltime_s=3600)]
    scheduler = Scheduler(ENGINE, profiles=profiles, walltime_margin_s=60)
    scheduler.submit(CallRequest("two-hours", 1.0, label="hpc", limit=7200))
    assert scheduler.schedule(NOW).asks == ()
    assert scheduler.reason("two-hours") == WaitReason(
        WaitKind.WALLTIME,
        "needs up to 7200 s (+60 s to spare); the profile with 'hpc' allows at most 3600 s",
    )


def test_a_call_without_a_limit_never_goes_where_it_would_be_told_at_once_to_stop() -> None:
    # Its worker tells such a call 120 s before the margin: a job with 120 s left would tell
    # it at once, and the job it checkpointed in would take it straight back.
    profiles = [
        Profile("hpc", "small", frozenset({"hpc"}), cpus=1, walltime_s=120, notice_s=120),
        Profile("hpc", "long", frozenset({"hpc"}), cpus=2, walltime_s=3600, notice_s=120),
    ]
    scheduler = Scheduler(ENGINE, profiles=profiles, walltime_margin_s=10)
    told = replace(worker("told", "hpc", slots=4), ends_at=NOW + 120, notice_s=120)
    scheduler.add_worker(told)
    scheduler.submit(CallRequest("untimed", 1.0, label="hpc"))
    plan = scheduler.schedule(NOW)
    assert plan.placements == () and plan.holds == {}
    assert [(a.profile, a.request_id) for a in plan.asks] == [("long", "untimed")]
    # Where no profile's job outlives its margin and notice, the reason says so.
    scheduler.set_profiles(profiles[:1])
    scheduler.submit(CallRequest("untimed-2", 2.0, label="hpc"))
    scheduler.schedule(NOW)
    assert scheduler.reason("untimed-2") == WaitReason(
        WaitKind.WALLTIME,
        "sets no limit, and every job that could run it is within its 10 s margin and the"
        " 120 s notice its calls get (told's job ends in 120 s; the profile with 'hpc'"
        " allows at most 120 s)",
    )
    # A worker with time for the notice takes it, its limit the job's end less the margin.
    scheduler.add_worker(replace(worker("fresh", "hpc", slots=1), ends_at=NOW + 140, notice_s=120))
    (placed,) = scheduler.schedule(NOW).placements
    assert (placed.request_id, placed.worker_id, placed.job_limit) == ("untimed", "fresh", 130)
