"""The rules of a pass, one table row each: where a request runs and what it takes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fluksio.scheduler import (
    ENGINE_ID,
    CallRequest,
    Container,
    Containers,
    Policy,
    Profile,
    Provisioning,
    Scheduler,
    WaitKind,
    WaitReason,
)
from tests.support.scheduling import ENGINE, placed, worker


def test_unlabelled_requests_run_on_the_engine_only() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("w", "cpu"))
    scheduler.submit(CallRequest("r", 1.0))
    assert placed(scheduler) == {"r": ENGINE_ID}


def test_best_fit_keeps_gpu_machines_and_large_machines_free() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("gpu-box", "any", cpus=64, gpus=4))
    scheduler.add_worker(worker("big", "any", cpus=64))
    scheduler.add_worker(worker("small", "any", cpus=4))
    scheduler.submit(CallRequest("cpu-job", 1.0, label="any", cpus=2))
    scheduler.submit(CallRequest("mid-job", 2.0, label="any", cpus=8))
    scheduler.submit(CallRequest("gpu-job", 3.0, label="any", gpus=1))
    assert placed(scheduler) == {"cpu-job": "small", "mid-job": "big", "gpu-job": "gpu-box"}


def test_gpu_indices_are_disjoint_and_come_back_exactly() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("g", "gpu", gpus=4))
    scheduler.submit(CallRequest("a", 1.0, label="gpu", gpus=2))
    scheduler.submit(CallRequest("b", 2.0, label="gpu", gpus=2))
    plan = scheduler.schedule()
    assert [p.gpu_ids for p in plan.placements] == [(0, 1), (2, 3)]
    scheduler.submit(CallRequest("c", 3.0, label="gpu", gpus=1))
    assert scheduler.schedule().placements == ()
    released = scheduler.finish("b")
    assert released.gpu_ids == (2, 3) and released.taken == (2, 0, 0, 1)
    assert [p.gpu_ids for p in scheduler.schedule().placements] == [(2,)]
    scheduler.finish("c")
    scheduler.finish("a")
    assert (scheduler.place("g").used, scheduler.place("g").free_gpu_ids) == (
        (0, 0, 0, 0),
        [0, 1, 2, 3],
    )


def test_thread_caps_follow_the_request_or_a_fair_share() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.submit(CallRequest("asks-3", 1.0, cpus=3))
    scheduler.submit(CallRequest("asks-none", 2.0))
    threads = {p.request_id: p.threads for p in scheduler.schedule().placements}
    assert threads == {"asks-3": 3, "asks-none": 2}  # the engine: 8 cores over 4 slots


def test_a_worker_that_reports_nothing_is_scheduled_by_label_and_slots() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("pi", "relays", slots=1, cpus=None, gpus=None, ram_mb=None))
    scheduler.submit(CallRequest("r1", 1.0, label="relays", cpus=4, ram_mb=100))
    scheduler.submit(CallRequest("r2", 2.0, label="relays"))
    plan = scheduler.schedule()
    assert [(p.request_id, p.gpu_ids, p.threads, p.cpus) for p in plan.placements] == [
        ("r1", (), 4, 0)
    ]
    assert scheduler.waiting() == ["r2"], "one slot: the second waits"


def test_prefer_runs_on_the_engine_when_nothing_attached_could() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.submit(CallRequest("nothing-attached", 1.0, label="gpu", policy=Policy.PREFER))
    assert placed(scheduler) == {"nothing-attached": ENGINE_ID}
    scheduler.add_worker(worker("g", "gpu", gpus=1))
    scheduler.submit(CallRequest("fits", 2.0, label="gpu", policy=Policy.PREFER, gpus=1))
    scheduler.submit(CallRequest("too-big", 3.0, label="gpu", policy=Policy.PREFER, gpus=2))
    assert placed(scheduler) == {"fits": "g", "too-big": ENGINE_ID}


def test_require_waits_then_runs_as_soon_as_a_worker_attaches() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.submit(CallRequest("r", 1.0, label="gpu", gpus=1))
    assert placed(scheduler) == {}
    scheduler.add_worker(worker("g", "gpu", gpus=1))
    assert placed(scheduler) == {"r": "g"}


def test_first_come_first_served_across_shapes() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("w", "cpu", slots=1))
    for n, cpus in enumerate((1, 2, 1, 3)):
        scheduler.submit(CallRequest(f"r{n}", float(10 - n), label="cpu", cpus=cpus))
    order = []
    for _ in range(4):
        plan = scheduler.schedule()
        assert len(plan.placements) == 1
        order.append(plan.placements[0].request_id)
        scheduler.finish(order[-1])
    assert order == ["r3", "r2", "r1", "r0"]


def test_a_large_request_is_not_starved_by_later_small_ones() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("w", "cpu", slots=8, cpus=8))
    scheduler.submit(CallRequest("running", 0.0, label="cpu", cpus=4))
    scheduler.schedule()
    scheduler.submit(CallRequest("large", 1.0, label="cpu", cpus=8))
    scheduler.submit(CallRequest("small", 2.0, label="cpu", cpus=2))
    plan = scheduler.schedule()
    assert plan.placements == (), "small would fit now but would delay large"
    assert plan.holds == {"large": "w"}
    with pytest.raises(TypeError):
        plan.holds["large"] = "elsewhere"  # type: ignore[index]
    scheduler.finish("running")
    assert placed(scheduler) == {"large": "w"}


def test_backfill_uses_what_a_hold_leaves() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("g", "any", slots=4, cpus=16, gpus=4))
    scheduler.add_worker(worker("elsewhere", "any", slots=1, cpus=2))
    scheduler.submit(CallRequest("running", 0.0, label="any", gpus=3))
    scheduler.schedule()
    scheduler.submit(CallRequest("large", 1.0, label="any", gpus=2, cpus=4))
    scheduler.submit(CallRequest("cpu-small", 2.0, label="any", cpus=4))
    scheduler.submit(CallRequest("cpu-tiny", 3.0, label="any", cpus=1))
    plan = scheduler.schedule()
    # The hold on g takes 2 GPUs and 4 cores of 16: CPU-only work still fits beside it.
    assert {p.request_id: p.worker_id for p in plan.placements} == {
        "cpu-small": "g",
        "cpu-tiny": "elsewhere",
    }
    assert plan.holds == {"large": "g"}


def test_a_hold_stays_on_its_place_across_passes() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("a", "cpu", slots=1, cpus=8))
    scheduler.submit(CallRequest("on-a", 0.0, label="cpu", cpus=1))
    scheduler.schedule()
    scheduler.submit(CallRequest("waiting", 1.0, label="cpu", cpus=8))
    assert scheduler.schedule().holds == {"waiting": "a"}
    # A place that sorts first by the hold rule arrives and is taken by earlier work:
    # the waiting request keeps its place in line on a rather than starting over.
    scheduler.add_worker(worker("0-new", "cpu", slots=1, cpus=8))
    scheduler.submit(CallRequest("earlier", 0.5, label="cpu", cpus=1))
    plan = scheduler.schedule()
    assert {p.request_id: p.worker_id for p in plan.placements} == {"earlier": "0-new"}
    assert plan.holds == {"waiting": "a"}


def test_provisioning_asks_for_the_smallest_fitting_profile_once() -> None:
    profiles = [
        Profile("hpc", "gpu-4", frozenset({"gpu"}), cpus=32, gpus=4),
        Profile("hpc", "gpu-1", frozenset({"gpu"}), cpus=8, gpus=1),
        Profile("cloud", "cpu", frozenset({"cpu"}), cpus=64),
    ]
    scheduler = Scheduler(ENGINE, profiles=profiles)
    scheduler.submit(CallRequest("one", 1.0, label="gpu", gpus=1))
    scheduler.submit(CallRequest("two", 2.0, label="gpu", gpus=1))
    scheduler.submit(CallRequest("four", 3.0, label="gpu", gpus=3))
    scheduler.submit(CallRequest("engine-only", 4.0, cpus=64))
    asks = scheduler.schedule().asks
    assert [(a.profile, a.request_id) for a in asks] == [("gpu-1", "one"), ("gpu-4", "four")]
    # Once the driver says both are under way, nothing is asked again.
    under_way = Provisioning(under_way=True)
    scheduler.set_profiles(
        [replace(p, provisioning=under_way) if p.cpus != 64 else p for p in profiles]
    )
    assert scheduler.schedule().asks == ()


def test_the_next_profile_that_fits_is_asked_when_the_smallest_cannot_bring_a_machine() -> None:
    # Three machines one owns: the smallest already runs its one worker, the next one's
    # sshd refused (it rests): the largest is started.
    small = Profile("boxes", "small", frozenset({"gpu"}), cpus=8, gpus=1)
    middle = Profile("boxes", "middle", frozenset({"gpu"}), cpus=16, gpus=1)
    large = Profile("boxes", "large", frozenset({"gpu"}), cpus=32, gpus=2)
    scheduler = Scheduler(ENGINE, profiles=[large, middle, small])
    scheduler.submit(CallRequest("a", 1.0, label="gpu", gpus=1))
    assert [a.profile for a in scheduler.schedule().asks] == ["small"], "the smallest first"
    # While small's request is under way, nothing larger is asked for the same call.
    starting = Provisioning(under_way=True)
    scheduler.set_profiles([large, middle, replace(small, provisioning=starting)])
    assert scheduler.schedule().asks == ()
    running = Provisioning(jobs=1)
    resting = Provisioning(
        resting_until=130.0, said="the last attempt failed (cannot reach me@middle)"
    )
    scheduler.set_profiles(
        [large, replace(middle, provisioning=resting), replace(small, provisioning=running)]
    )
    scheduler.add_worker(worker("boxes-small", "gpu", slots=1, gpus=1))
    scheduler.submit(CallRequest("b", 2.0, label="gpu", gpus=1))
    plan = scheduler.schedule()
    assert [(p.request_id, p.worker_id) for p in plan.placements] == [("a", "boxes-small")]
    assert [(a.profile, a.request_id) for a in plan.asks] == [("large", "b")]


def test_busy_workers_scale_out_one_pending_job_at_a_time_up_to_max_workers() -> None:
    profile = Profile("hpc", "g", frozenset({"gpu"}), gpus=1, max_workers=2)
    scheduler = Scheduler(ENGINE, profiles=[profile])
    scheduler.add_worker(worker("g", "gpu", slots=1, gpus=1))
    for n, name in enumerate("abc"):
        scheduler.submit(CallRequest(name, float(n), label="gpu", gpus=1))
    plan = scheduler.schedule()
    assert [p.request_id for p in plan.placements] == ["a"]
    assert [(a.profile, a.request_id) for a in plan.asks] == [("g", "b")], "one per pass"
    pending = Provisioning(under_way=True, jobs=1, said="0 of 2 jobs running, job 41 PENDING")
    scheduler.set_profiles([replace(profile, provisioning=pending)])
    assert scheduler.schedule().asks == (), "one pending at a time"
    assert scheduler.reason("b") == WaitReason(
        WaitKind.PROVISIONING,
        "provisioning hpc/g, 0 of 2 jobs running, job 41 PENDING",
        provisioning="hpc/g",
    )
    assert scheduler.schedule().holds == {"b": "g"}, "it keeps its place in line meanwhile"
    up = Provisioning(jobs=1)
    scheduler.set_profiles([replace(profile, provisioning=up)])
    assert [a.request_id for a in scheduler.schedule().asks] == ["b"], "the next may go out"
    full = Provisioning(jobs=2)
    scheduler.set_profiles([replace(profile, provisioning=full)])
    assert scheduler.schedule().asks == (), "max_workers reached"
    told = scheduler.reason("b")
    assert told is not None and told.kind is WaitKind.BUSY, told


def test_with_max_workers_1_a_profiles_busy_worker_brings_no_second_job() -> None:
    profile = Profile("hpc", "g", frozenset({"gpu"}), gpus=1)
    scheduler = Scheduler(ENGINE, profiles=[replace(profile, provisioning=Provisioning(jobs=1))])
    scheduler.add_worker(worker("hpc-g", "gpu", slots=1, gpus=1))
    scheduler.submit(CallRequest("a", 1.0, label="gpu", gpus=1))
    scheduler.submit(CallRequest("b", 2.0, label="gpu", gpus=1))
    assert scheduler.schedule().asks == ()


def test_a_gone_worker_returns_its_calls_and_holds_move_on() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("a", "cpu", slots=1))
    scheduler.add_worker(worker("b", "cpu", slots=1))
    scheduler.submit(CallRequest("x", 1.0, label="cpu"))
    scheduler.submit(CallRequest("y", 2.0, label="cpu"))
    scheduler.schedule()
    assert scheduler.remove_worker("a") == ("x",)
    assert "x" not in scheduler.running() and scheduler.reason("x") is None
    scheduler.submit(CallRequest("z", 3.0, label="cpu"))
    assert placed(scheduler) == {}
    scheduler.finish("y")
    assert placed(scheduler) == {"z": "b"}


def test_withdrawn_requests_leave_the_queue() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.submit(CallRequest("gone", 1.0, label="nowhere"))
    scheduler.schedule()
    assert scheduler.withdraw("gone") is True
    assert scheduler.waiting() == [] and scheduler.withdraw("gone") is False


def test_a_place_that_stopped_answering_keeps_its_calls_and_gets_nothing_new() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("frozen", "cpu", slots=2))
    scheduler.submit(CallRequest("running", 0.0, label="cpu"))
    assert [p.worker_id for p in scheduler.schedule().placements] == ["frozen"]
    scheduler.set_paused("frozen", True)
    scheduler.submit(CallRequest("new", 1.0, label="cpu"))
    assert scheduler.schedule().placements == ()
    assert scheduler.allocation("running") is not None, "what runs there stays"
    reason = scheduler.reason("new")
    assert reason is not None and "frozen: not answering" in reason.text
    assert scheduler.explain("new", "frozen") == (
        "frozen is not answering; it is given nothing new until it does"
    )
    scheduler.add_worker(worker("healthy", "cpu", slots=1))
    assert [p.worker_id for p in scheduler.schedule().placements] == ["healthy"]
    scheduler.submit(CallRequest("later", 2.0, label="cpu"))
    scheduler.set_paused("frozen", False)
    assert [p.worker_id for p in scheduler.schedule().placements] == ["frozen"]


def test_a_stopping_place_gets_nothing_new_answering_or_not_and_is_never_held() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("leaving", "cpu", slots=2))
    scheduler.submit(CallRequest("running", 0.0, label="cpu"))
    assert [p.worker_id for p in scheduler.schedule().placements] == ["leaving"]
    scheduler.set_stopping("leaving")
    scheduler.set_paused("leaving", False)  # it answers a ping: still stopping
    scheduler.submit(CallRequest("new", 1.0, label="cpu"))
    assert scheduler.schedule().placements == ()
    assert scheduler.allocation("running") is not None, "what runs there stays"
    reason = scheduler.reason("new")
    assert reason is not None and "(leaving: stopping)" in reason.text, reason
    assert "next in line" not in reason.text, "never held for a place that takes nothing"
    assert scheduler.explain("new", "leaving") == (
        "leaving is stopping (its worker was told to stop); it is given nothing new"
    )
    view = scheduler.view("leaving")
    assert view is not None and view.stopping and view.paused
    scheduler.finish("running")
    assert scheduler.schedule().placements == (), "not even once it is idle"
    scheduler.add_worker(worker("next", "cpu", slots=1))
    assert [p.worker_id for p in scheduler.schedule().placements] == ["next"]


def test_calls_go_to_free_slots_first_then_into_busy_workers_pipelines() -> None:
    """A worker's pipeline takes calls ahead only once no place has a slot free: two
    calls on two idle workers run side by side, not one behind the other."""
    scheduler = Scheduler(ENGINE)
    for name in ("far-a", "far-b"):
        scheduler.add_worker(worker(name, "far", slots=1, pipeline=2))
    scheduler.submit(CallRequest("first", 1.0, label="far"))
    scheduler.submit(CallRequest("second", 2.0, label="far"))
    assert placed(scheduler) == {"first": "far-a", "second": "far-b"}
    for n in range(5):
        scheduler.submit(CallRequest(f"more{n}", 3.0 + n, label="far"))
    ahead = placed(scheduler)
    assert sorted(ahead.values()) == ["far-a", "far-a", "far-b", "far-b"]
    assert "more4" not in ahead
    reason = scheduler.reason("more4")
    assert reason is not None
    assert "all 1 slots busy and 2 calls sent ahead" in reason.text


def test_calls_sent_ahead_take_their_resources_and_threads_count_running_slots() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("gpu", "gpu", slots=1, pipeline=2, cpus=8, gpus=1))
    scheduler.submit(CallRequest("runs", 1.0, label="gpu", gpus=1))
    scheduler.submit(CallRequest("ahead", 2.0, label="gpu"))
    plan = scheduler.schedule()
    # Its thread cap is the share of one running slot, not of the slots and the pipeline.
    assert [(p.request_id, p.threads) for p in plan.placements] == [("runs", 8), ("ahead", 8)]
    scheduler.submit(CallRequest("second-gpu", 3.0, label="gpu", gpus=1))
    assert placed(scheduler) == {}  # the GPU is the running call's: not sent ahead


WEIGHTS = ("sha256:" + "a" * 64, 20 << 30)
"""A 20-GiB model, as a call's input."""


def test_a_call_goes_where_its_inputs_are_cached_among_the_places_that_fit() -> None:
    scheduler = Scheduler(ENGINE)
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        scheduler.add_worker(worker(name, "gpu", slots=1))
    scheduler.set_cached("gpu-b", frozenset({WEIGHTS[0]}))
    scheduler.submit(CallRequest("infer", 1.0, label="gpu", inputs=(WEIGHTS,)))
    scheduler.submit(CallRequest("other", 2.0, label="gpu"))
    plan = scheduler.schedule()
    assert [(p.request_id, p.worker_id, p.cached_bytes) for p in plan.placements] == [
        ("infer", "gpu-b", 20 << 30),
        ("other", "gpu-a", 0),
    ]
    # Busy, the worker with the cache is not waited for: the call goes where it fits.
    scheduler.submit(CallRequest("again", 3.0, label="gpu", inputs=(WEIGHTS,)))
    assert placed(scheduler) == {"again": "gpu-c"}


def test_a_call_in_a_container_goes_where_its_image_is_held_before_where_its_inputs_are() -> None:
    """Holding the image is a criterion of its own, ranked above cached inputs: a pull of
    gigabytes before the call starts, where its inputs' bytes are counted only after."""
    scheduler = Scheduler(ENGINE)
    runs = Containers("podman", ("registry.example/*/*",))
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        scheduler.add_worker(worker(name, "gpu", slots=1, containers=runs))
    image = "registry.example/lab/cuda:12"
    scheduler.set_cached("gpu-a", frozenset({WEIGHTS[0]}))
    scheduler.set_cached("gpu-c", frozenset(), frozenset({image}))
    scheduler.submit(
        CallRequest("infer", 1.0, label="gpu", inputs=(WEIGHTS,), container=Container(image))
    )
    scheduler.submit(CallRequest("plain", 2.0, label="gpu", inputs=(WEIGHTS,)))
    plan = scheduler.schedule()
    assert [(p.request_id, p.worker_id, p.cached_bytes) for p in plan.placements] == [
        ("infer", "gpu-c", 0),
        ("plain", "gpu-a", 20 << 30),
    ]


def test_a_call_a_profile_could_bring_a_machine_for_is_not_sent_ahead() -> None:
    """Sent ahead, a call would count as placed and no machine would be asked for it: it
    waits in the queue instead, and the profile is asked for, as without a pipeline."""
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("box", "box", slots=1, pipeline=2, cpus=1))
    scheduler.submit(CallRequest("first", 1.0, label="box"))
    scheduler.submit(CallRequest("second", 2.0, label="box"))
    scheduler.set_profiles([Profile("hosts", "big", frozenset({"box"}), cpus=2)])
    plan = scheduler.schedule()
    assert [p.request_id for p in plan.placements] == ["first"]
    assert [(a.profile, a.request_id) for a in plan.asks] == [("big", "second")]
    scheduler.set_profiles([])  # no machine could come for it: sent ahead after all
    assert placed(scheduler) == {"second": "box"}
