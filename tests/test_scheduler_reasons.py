"""Each kind of wait says, in words a person can act on, why it waits."""

from __future__ import annotations

import doctest
from dataclasses import replace

import fluksio.scheduler
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
    Worker,
)
from tests.support.scheduling import ENGINE, worker


def gpu_worker(worker_id: str, name: str, *, gpus: int, slots: int = 4) -> Worker:
    return worker(worker_id, "gpu", name=name, slots=slots, cpus=32, gpus=gpus, ram_mb=262144)


def _waiting_reason(scheduler: Scheduler, request: CallRequest) -> tuple[WaitKind, str]:
    scheduler.submit(request)
    scheduler.schedule()
    reason = scheduler.reason(request.id)
    assert reason is not None
    return reason.kind, reason.text


def test_module_example_runs() -> None:
    assert doctest.testmod(fluksio.scheduler, raise_on_error=True).attempted > 5


def test_no_worker_carries_the_label() -> None:
    kind, text = _waiting_reason(Scheduler(ENGINE), CallRequest("r", 1.0, label="gpu", gpus=1))
    assert kind is WaitKind.NO_WORKER
    assert text == "no attached worker carries label 'gpu'"


def test_workers_carry_the_label_but_none_has_it_free() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(gpu_worker("a", "gpu-a", gpus=4))
    scheduler.add_worker(gpu_worker("b", "gpu-b", gpus=2, slots=1))
    scheduler.submit(CallRequest("busy-a", 0.0, label="gpu", gpus=3))
    scheduler.submit(CallRequest("busy-b", 0.1, label="gpu", gpus=2))
    scheduler.schedule()
    kind, text = _waiting_reason(scheduler, CallRequest("r", 1.0, label="gpu", gpus=2))
    assert kind is WaitKind.BUSY
    assert text == (
        "2 workers carry 'gpu'; none has 2 GPUs free (gpu-a: 1 of 4 free;"
        " gpu-b: all 1 slots busy); next in line on gpu-b"
    )
    reason = scheduler.reason("r")
    assert reason is not None and reason.exhausted == {"gpus": 2, "slots": 1}


def test_a_request_larger_than_anything_that_exists() -> None:
    scheduler = Scheduler(
        ENGINE, profiles=[Profile("hpc", "gpu-small", frozenset({"gpu"}), gpus=1)]
    )
    scheduler.add_worker(gpu_worker("a", "gpu-a", gpus=4))
    kind, text = _waiting_reason(scheduler, CallRequest("r", 1.0, label="gpu", gpus=8))
    assert kind is WaitKind.TOO_LARGE
    assert text == "needs 8 GPUs; the largest worker or profile with 'gpu' has 4"


def test_provisioning_then_outstanding() -> None:
    profiles = [
        Profile("hpc", "gpu-large", frozenset({"gpu"}), cpus=32, gpus=4, ram_mb=262144),
        Profile("hpc", "gpu-small", frozenset({"gpu"}), cpus=8, gpus=1, ram_mb=65536),
    ]
    scheduler = Scheduler(ENGINE, profiles=profiles)
    scheduler.submit(CallRequest("r", 1.0, label="gpu", gpus=1))
    plan = scheduler.schedule()
    assert [(a.provisioner, a.profile, a.request_id) for a in plan.asks] == [
        ("hpc", "gpu-small", "r")
    ]
    reason = scheduler.reason("r")
    assert reason is not None and reason.kind is WaitKind.PROVISIONING
    assert reason.text == (
        "provisioning hpc/gpu-small (outstanding): no attached worker carries label 'gpu'"
    )
    assert reason.provisioning == "hpc/gpu-small"
    assert scheduler.schedule().asks == plan.asks, "the driver has not said it is outstanding"
    # The provisioning side says how the request stands, in its words; the scheduler
    # neither asks again nor words it (tests/test_provisioning_words.py holds the words).
    submitted = Provisioning(under_way=True, jobs=1, said="Slurm job 41 PENDING (Priority)")
    scheduler.set_profiles([replace(profiles[1], provisioning=submitted), profiles[0]])
    again = scheduler.schedule()
    assert again.asks == (), "never asked twice while outstanding"
    assert scheduler.reason("r") == WaitReason(
        WaitKind.PROVISIONING,
        "provisioning hpc/gpu-small, Slurm job 41 PENDING (Priority)",
        provisioning="hpc/gpu-small",
    )
    # From here the larger profile has its one job alive, so the smaller is what the call
    # waits for (a profile that can bring a machine would be asked instead: rules tests).
    large = replace(profiles[0], provisioning=Provisioning(jobs=1))
    failed = Provisioning(
        resting_until=130.0, said="the last attempt failed (sbatch: x)", counting_down=True
    )
    scheduler.set_profiles([replace(profiles[1], provisioning=failed), large])
    assert scheduler.schedule().asks == (), "resting after a failure"
    resting = scheduler.reason("r", now=100.4)
    assert resting is not None and resting.text == (
        "provisioning hpc/gpu-small, the last attempt failed (sbatch: x); trying again in 30 s"
    )
    later = scheduler.reason("r", now=125.0)
    assert later is not None and later.text.endswith("; trying again in 5 s"), "it counts down"
    login = "login needed: run 'fluksio provisioners login hpc'"
    waiting = Provisioning(resting_until=130.0, said=login)
    scheduler.set_profiles([replace(profiles[1], provisioning=waiting), large])
    assert scheduler.schedule().asks == (), "nobody has logged in: nothing to ask yet"
    needs = scheduler.reason("r", now=100.4)
    assert needs is not None and needs.text == f"provisioning hpc/gpu-small, {login}"
    # At the cap (max_workers, asked of the profile), nothing more goes out.
    capped = Provisioning(jobs=2, said="max_workers reached")
    two = replace(profiles[1], provisioning=capped, max_workers=2)
    assert two.at_cap and not replace(two, max_workers=3).at_cap
    scheduler.set_profiles([two, large])
    assert scheduler.schedule().asks == (), "never past max_workers"
    full = scheduler.reason("r")
    assert full is not None and full.text == "provisioning hpc/gpu-small, max_workers reached"
    # A profile the provisioning side has said nothing of yet waits as any other call.
    scheduler.set_profiles([replace(profiles[1], provisioning=Provisioning(jobs=2)), large])
    quiet = scheduler.reason("r")
    assert quiet is not None and not quiet.text.startswith("provisioning hpc/gpu-small, ")


def test_busy_workers_whose_every_profile_is_at_its_cap_say_why_no_more_come() -> None:
    said = "the site's limit reached (QOS 'short' allows 1 job per user): 1 Slurm job is alive"
    capped = Profile("hpc", "small", frozenset({"gpu"}), gpus=4, max_workers=1,
                     provisioning=Provisioning(jobs=1, said=said))  # fmt: skip
    scheduler = Scheduler(ENGINE, profiles=[capped])
    scheduler.add_worker(gpu_worker("a", "gpu-a", gpus=4, slots=1))
    scheduler.submit(CallRequest("busy", 0.0, label="gpu", gpus=1))
    scheduler.schedule()
    kind, text = _waiting_reason(scheduler, CallRequest("r", 1.0, label="gpu", gpus=1))
    assert kind is WaitKind.BUSY
    assert text == (
        "1 worker carries 'gpu'; none has 1 GPU free (gpu-a: all 1 slots busy); next in line"
        f" on gpu-a; provisioning hpc/small, {said}"
    )
    # With room for another job, the profile is asked instead: nothing more to say here.
    scheduler.set_profiles([replace(capped, max_workers=2)])
    assert scheduler.schedule().asks


def test_engine_busy_and_engine_too_small() -> None:
    scheduler = Scheduler(Worker(id=ENGINE_ID, name="engine", slots=1, cpus=8))
    scheduler.submit(CallRequest("running", 0.0))
    scheduler.schedule()
    assert _waiting_reason(scheduler, CallRequest("r", 1.0)) == (
        WaitKind.BUSY,
        "waiting for the engine: all 1 slots busy; next in line",
    )
    assert _waiting_reason(scheduler, CallRequest("huge", 2.0, cpus=64)) == (
        WaitKind.TOO_LARGE,
        "needs 64 cpus; the engine has 8",
    )


def test_busy_on_several_resources_names_units_and_caps_the_list() -> None:
    scheduler = Scheduler(ENGINE)
    for n in range(6):
        scheduler.add_worker(
            Worker(
                id=f"w{n}", name=f"cpu-{n}", labels=frozenset({"cpu"}), slots=8, cpus=4, ram_mb=1000
            )
        )
        scheduler.submit(CallRequest(f"fill{n}", float(n), label="cpu", cpus=3))
    scheduler.schedule()
    kind, text = _waiting_reason(scheduler, CallRequest("r", 10.0, label="cpu", cpus=2, ram_mb=500))
    assert kind is WaitKind.BUSY
    assert text.startswith(
        "6 workers carry 'cpu'; none has 2 cpus and 500 MB free (cpu-0: 1 of 4 cpus free;"
    )
    assert "; and 2 more)" in text


def test_prefer_waits_when_the_labelled_worker_is_busy() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(gpu_worker("a", "gpu-a", gpus=1, slots=1))
    scheduler.submit(CallRequest("first", 0.0, label="gpu", policy=Policy.PREFER, gpus=1))
    plan = scheduler.schedule()
    assert [p.worker_id for p in plan.placements] == ["a"]
    kind, text = _waiting_reason(
        scheduler, CallRequest("second", 1.0, label="gpu", policy=Policy.PREFER, gpus=1)
    )
    assert kind is WaitKind.BUSY and text.startswith("1 worker carries 'gpu'")


def test_explain_says_why_not_a_given_worker() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(gpu_worker("a", "gpu-a", gpus=4))
    scheduler.add_worker(Worker(id="c", name="cpu-box", labels=frozenset({"cpu"}), slots=2, cpus=8))
    scheduler.add_worker(gpu_worker("s", "gpu-small", gpus=1))
    scheduler.submit(CallRequest("fill", 0.0, label="gpu", gpus=3))
    scheduler.submit(CallRequest("r", 1.0, label="gpu", gpus=2))
    scheduler.schedule()
    assert scheduler.explain("r", "c") == "cpu-box does not carry label 'gpu'"
    assert scheduler.explain("r", "s") == (
        "gpu-small is too small: it has 1 GPU, the request needs 2 GPUs"
    )
    assert scheduler.explain("r", "a") == "gpu-a: 1 of 4 GPUs free; the request needs 2 GPUs"


IMAGE = "registry.example/cuda:12"


def test_only_a_place_that_allows_the_image_gets_the_call_and_the_others_say_why() -> None:
    scheduler = Scheduler(ENGINE)
    scheduler.add_worker(worker("plain", "gpu"))
    allows = Containers("podman", ("registry.example/*",))
    scheduler.add_worker(worker("box", "gpu", containers=allows))
    scheduler.submit(CallRequest("r1", 1.0, label="gpu", container=Container(IMAGE)))
    scheduler.submit(CallRequest("r2", 2.0, label="gpu", container=Container("other:1")))
    scheduler.submit(CallRequest("r3", 3.0, label="gpu", container=Container(IMAGE, "apptainer")))
    placed = scheduler.schedule(0.0).placements
    assert [(p.request_id, p.worker_id) for p in placed] == [("r1", "box")]
    other = scheduler.reason("r2")
    assert other is not None and other.kind is WaitKind.NO_WORKER
    assert other.text == (
        "no worker may run image 'other:1'; of those with 'gpu': box allows"
        " 'registry.example/*' (podman); plain runs no containers (a worker runs it when"
        " started with --containers and an --allow-image that matches it)"
    )
    apptainer = scheduler.reason("r3")
    assert (
        apptainer is not None
        and "image 'registry.example/cuda:12' with apptainer" in apptainer.text
    )
    assert (
        scheduler.explain("r2", "plain")
        == "it runs in image 'other:1', and plain runs no containers"
    )
