"""Properties of the scheduler over random workers, requests and event sequences.

Each pass of the fast, incremental scheduler is compared with the plain-loop reference
(:mod:`fluksio.scheduler.reference`) on the same snapshot, and after every step the
invariants a user relies on are checked: nothing over-allocated, labels respected, GPU
indices distinct, release exact, every wait explained, no idle place left unused by a
request it could run, the same input giving the same output, and nothing starving.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fluksio.scheduler import (
    ENGINE_ID,
    CallRequest,
    Container,
    Containers,
    Policy,
    Profile,
    Provisioning,
    Scheduler,
    Worker,
)
from fluksio.scheduler.reference import reference_plan
from fluksio.scheduler.resources import UNKNOWN, covers
from fluksio.scheduler.scheduler import plan
from fluksio.scheduler.state import need_of
from tests.support.properties import against_reference
from tests.support.scheduling import INPUTS, MARGIN, NOW, allowed, allows_container, containers

LABELS = ["gpu", "cpu", "arm"]
labels_strategy = st.frozensets(st.sampled_from(LABELS), max_size=2)
maybe = st.one_of(st.none(), st.integers(0, 8))


def _in_time(worker: Worker, request: CallRequest) -> bool:
    """The rule as a user states it: the call's limit, and a margin, fit before the end; a
    call without a limit runs in any job not yet in its margin and its notice."""
    if worker.ends_at is None:
        return True
    if request.limit is None:
        return worker.ends_at > NOW + MARGIN + worker.notice_s
    return NOW + request.limit + MARGIN <= worker.ends_at


def _engine() -> Worker:
    return Worker(id=ENGINE_ID, name="engine", slots=2, cpus=4, ram_mb=4096)


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.scheduler = Scheduler(_engine(), walltime_margin_s=MARGIN)
        self.counter = 0
        self.clock = 0.0
        self.profiles: list[Profile] = []
        self.passes = 0
        self.since_last_pass: set[str] = set()

    def _next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- events --------------------------------------------------------------------

    @rule(
        labels=labels_strategy,
        slots=st.integers(0, 3),
        pipeline=st.sampled_from([0, 0, 1, 2]),
        cpus=maybe,
        gpus=st.one_of(st.none(), st.integers(0, 4)),
        ram=st.one_of(st.none(), st.sampled_from([0, 512, 4096])),
        ends_in=st.sampled_from([None, None, 100.0, 10_000.0]),
        notice=st.sampled_from([0.0, 0.0, 30.0, 40.0, 120.0]),
        holds=st.frozensets(st.sampled_from([d for d, _ in INPUTS])),
        allows=allowed,
    )
    def attach(
        self,
        *,
        labels: frozenset[str],
        slots: int,
        pipeline: int,
        cpus: int | None,
        gpus: int | None,
        ram: int | None,
        ends_in: float | None,
        notice: float,
        holds: frozenset[str],
        allows: Containers | None,
    ) -> None:
        worker_id = self._next_id("w")
        self.scheduler.add_worker(
            Worker(
                id=worker_id,
                name=worker_id,
                labels=labels,
                slots=slots,
                pipeline=pipeline,
                cpus=cpus,
                gpus=gpus,
                ram_mb=ram,
                ends_at=None if ends_in is None else NOW + ends_in,
                notice_s=notice,
                containers=allows,
            )
        )
        self.scheduler.set_cached(worker_id, holds)  # what it had cached when it attached

    @precondition(lambda self: len(self.scheduler.places()) > 1)
    @rule(data=st.data())
    def detach(self, data: st.DataObject) -> None:
        ids = sorted(p.id for p in self.scheduler.places() if p.id != ENGINE_ID)
        victim = data.draw(st.sampled_from(ids))
        running_there = {r for r, a in self.scheduler.running().items() if a.place_id == victim}
        assert set(self.scheduler.remove_worker(victim)) == running_there

    @rule(
        label=st.one_of(st.none(), st.sampled_from(LABELS)),
        policy=st.sampled_from(Policy),
        cpus=st.sampled_from([None, 1, 2, 6]),
        gpus=st.sampled_from([None, 0, 1, 3]),
        ram=st.sampled_from([None, 256, 8192]),
        copies=st.integers(1, 4),
        earlier=st.booleans(),
        limit=st.sampled_from([None, None, 30.0, 5_000.0]),
        inputs=st.lists(st.sampled_from(INPUTS), max_size=2, unique=True),
        container=containers,
    )
    def submit(
        self,
        *,
        label: str | None,
        policy: Policy,
        cpus: int | None,
        gpus: int | None,
        ram: int | None,
        copies: int,
        earlier: bool,
        limit: float | None,
        inputs: list[tuple[str, int]],
        container: Container | None,
    ) -> None:
        # Bursts of alike requests, so shapes repeat; mostly in time order, sometimes
        # older (an engine restart re-submits old work).
        for _ in range(copies):
            self.clock += 1.0
            queued_at = self.clock - 50.0 if earlier else self.clock
            request_id = self._next_id("r")
            self.scheduler.submit(
                CallRequest(
                    request_id,
                    queued_at,
                    label=label,
                    policy=policy,
                    cpus=cpus,
                    gpus=gpus,
                    ram_mb=ram,
                    limit=limit,
                    inputs=tuple(inputs),
                    container=container,
                )
            )
            self.since_last_pass.add(request_id)

    @precondition(lambda self: len(self.scheduler.places()) > 1)
    @rule(data=st.data(), holds=st.frozensets(st.sampled_from([d for d, _ in INPUTS])))
    def a_cache_changes(self, data: st.DataObject, holds: frozenset[str]) -> None:
        ids = sorted(p.id for p in self.scheduler.places() if p.id != ENGINE_ID)
        self.scheduler.set_cached(data.draw(st.sampled_from(ids)), holds)

    @precondition(lambda self: bool(self.scheduler.running()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(sorted(self.scheduler.running())))
        allocation = self.scheduler.running()[request_id]
        place = self.scheduler.place(allocation.place_id)
        used_before = place.used
        free_ids_before = set(place.free_gpu_ids)
        released = self.scheduler.finish(request_id)
        assert released == allocation
        assert place.used == used_before.minus(released.taken)
        assert set(place.free_gpu_ids) == free_ids_before | set(released.gpu_ids)

    @precondition(lambda self: len(self.scheduler.places()) > 1)
    @rule(data=st.data(), paused=st.booleans())
    def stop_or_resume_answering(self, data: st.DataObject, paused: bool) -> None:
        ids = sorted(p.id for p in self.scheduler.places() if p.id != ENGINE_ID)
        place_id = data.draw(st.sampled_from(ids))
        running_there = {r for r, a in self.scheduler.running().items() if a.place_id == place_id}
        self.scheduler.set_paused(place_id, paused)
        after = {r for r, a in self.scheduler.running().items() if a.place_id == place_id}
        assert after == running_there, "pausing keeps what runs there"

    @precondition(lambda self: bool(self.scheduler.waiting()))
    @rule(data=st.data())
    def withdraw(self, data: st.DataObject) -> None:
        request_id = data.draw(st.sampled_from(self.scheduler.waiting()))
        assert self.scheduler.withdraw(request_id)
        assert request_id not in self.scheduler.waiting()

    @rule(
        labels=labels_strategy,
        gpus=st.one_of(st.none(), st.integers(0, 4)),
        cpus=st.one_of(st.none(), st.integers(1, 16)),
        # 90 s: a 30-s limit and the margin exactly, where long enough is decided.
        walltime=st.sampled_from([None, 90.0, 120.0, 3_600.0]),
        notice=st.sampled_from([0.0, 30.0, 60.0]),
        max_workers=st.integers(1, 3),
        allows=allowed,
    )
    def add_profile(
        self,
        *,
        labels: frozenset[str],
        gpus: int | None,
        cpus: int | None,
        walltime: float | None,
        notice: float,
        max_workers: int,
        allows: Containers | None,
    ) -> None:
        profile = Profile(
            "p", self._next_id("prof"), labels, cpus=cpus, gpus=gpus, max_workers=max_workers
        )
        self.profiles.append(
            replace(profile, walltime_s=walltime, notice_s=notice, containers=allows)
        )
        self.scheduler.set_profiles(self.profiles)

    @rule(index=st.integers(0, 5), ends=st.booleans())
    def a_job_attaches_or_ends(self, index: int, ends: bool) -> None:
        """The driver's part: a pending job's worker attaches (the job still counts), or a
        job ends (it no longer does), as the profile's provisioning then says."""
        if not self.profiles:
            return
        profile = self.profiles[index % len(self.profiles)]
        jobs = profile.provisioning.jobs
        if ends and jobs > 0:
            changed = Provisioning(jobs=jobs - 1, paused=profile.provisioning.paused)
        elif profile.provisioning.under_way:
            changed = Provisioning(jobs=jobs, paused=profile.provisioning.paused)
        else:
            return
        self.profiles = [
            replace(p, provisioning=changed) if p.key == profile.key else p for p in self.profiles
        ]
        self.scheduler.set_profiles(self.profiles)

    @rule(index=st.integers(0, 5))
    def a_request_fails(self, index: int) -> None:
        """The driver's part: a pending request failed, and its profile rests (a login
        node or a host that refused): the next profile that fits may be asked instead."""
        if not self.profiles:
            return
        profile = self.profiles[index % len(self.profiles)]
        if not profile.provisioning.under_way:
            return
        state = profile.provisioning
        resting = Provisioning(jobs=state.jobs - 1, resting_until=NOW + 30, paused=state.paused)
        self.profiles = [
            replace(p, provisioning=resting) if p.key == profile.key else p for p in self.profiles
        ]
        self.scheduler.set_profiles(self.profiles)

    @rule(index=st.integers(0, 5))
    def a_profile_is_paused_or_resumed(self, index: int) -> None:
        """The driver's part: a person paused a profile (or it paused itself after
        failures in a row), or resumed it. A paused profile is never asked for."""
        if not self.profiles:
            return
        profile = self.profiles[index % len(self.profiles)]
        state = profile.provisioning
        toggled = replace(state, paused=not state.paused)
        self.profiles = [
            replace(p, provisioning=toggled) if p.key == profile.key else p for p in self.profiles
        ]
        self.scheduler.set_profiles(self.profiles)

    @rule()
    def schedule_pass(self) -> None:
        snapshot = replace(self.scheduler.snapshot(), now=NOW)
        expected = reference_plan(snapshot)
        assert plan(snapshot) == expected, "same snapshot, same plan, every time"
        result = self.scheduler.schedule(NOW)
        assert result == expected
        assert not {p.worker_id for p in result.placements} & set(snapshot.paused)
        requests = {r.id: r for r in snapshot.waiting}
        for placed in result.placements:
            # Every call placed where a job ends stops, at its own limit or the job's, with
            # the margin to spare; a job's end is a limit only for a call that set none.
            worker = self.scheduler.place(placed.worker_id).worker
            ends_at = worker.ends_at
            own = requests[placed.request_id].limit
            assert (placed.job_limit is not None) == (own is None and ends_at is not None)
            if ends_at is not None:
                limit = own if own is not None else placed.job_limit
                assert limit is not None and limit > 0 and NOW + limit + MARGIN <= ends_at
            if placed.job_limit is not None:  # it has the time its notice gives, and more
                assert placed.job_limit > worker.notice_s
        # The driver's part: a profile asked for is outstanding until its request ends,
        # and its job counts from the moment it is asked for.
        asked = {f"{ask.provisioner}/{ask.profile}" for ask in result.asks}
        paused = {p.key for p in self.profiles if p.provisioning.paused}
        assert not asked & paused, "a paused profile is asked for"
        self.profiles = [
            replace(
                p,
                provisioning=Provisioning(under_way=True, jobs=p.provisioning.jobs + 1),
            )
            if p.key in asked
            else p
            for p in self.profiles
        ]
        self.scheduler.set_profiles(self.profiles)
        self.passes += 1
        self.since_last_pass = set()
        self._no_idle_place_left_unused()

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def never_over_allocated_and_gpu_indices_distinct(self) -> None:
        running = self.scheduler.running()
        for place in self.scheduler.places():
            for d in range(4):
                if place.capacity[d] != UNKNOWN:
                    assert 0 <= place.used[d] <= place.capacity[d]
            granted = [i for a in running.values() if a.place_id == place.id for i in a.gpu_ids]
            assert len(granted) == len(set(granted)), "two calls share a GPU"
            assert sorted(granted + place.free_gpu_ids) == sorted(place.worker.device_ids)

    @invariant()
    def max_workers_is_a_cap(self) -> None:
        # Asks follow the scheduler's plan, which the reference planner's equals (checked at
        # every pass): neither asks for a profile whose jobs alive reached max_workers.
        for profile in self.profiles:
            assert profile.provisioning.jobs <= profile.max_workers, profile

    @invariant()
    def labels_respected(self) -> None:
        snapshot = self.scheduler.snapshot()
        for request, allocation in snapshot.running:
            place = self.scheduler.place(allocation.place_id)
            if request.label is None:
                assert place.id == ENGINE_ID
            elif place.id == ENGINE_ID:
                assert request.policy is Policy.PREFER
            else:
                assert request.label in place.worker.labels
            assert allows_container(place.worker, request), (
                "a container where its image is not allowed"
            )

    @invariant()
    def every_wait_has_a_reason(self) -> None:
        if self.passes == 0:
            return
        for request_id in self.scheduler.waiting():
            reason = self.scheduler.reason(request_id)
            assert reason is not None and reason.text.strip()
            if request_id not in self.since_last_pass:
                assert "not considered" not in reason.text, f"the pass skipped {request_id}"

    def _no_idle_place_left_unused(self) -> None:
        """After a pass, a waiting request never has an idle place it could run on."""
        snapshot = self.scheduler.snapshot()
        for request in snapshot.waiting:
            need = need_of(request)
            for place in self.scheduler.places():
                idle = place.used == (0, 0, 0, 0)
                if not idle or place.paused or not covers(place.capacity, need):
                    continue
                if not _in_time(place.worker, request):
                    continue  # its job ends before the request could finish
                if not allows_container(place.worker, request):
                    continue  # it may not run the request's image
                if request.label is None or (
                    request.policy is Policy.PREFER and place.id == ENGINE_ID
                ):
                    usable = place.id == ENGINE_ID and (
                        request.label is None
                        or not any(
                            covers(p.capacity, need)
                            for p in self.scheduler.places()
                            if request.label in p.worker.labels
                            and p.id != ENGINE_ID
                            and _in_time(p.worker, request)
                        )
                    )
                else:
                    usable = request.label in place.worker.labels and place.id != ENGINE_ID
                assert not usable, f"{request.id} waits while {place.id} sits idle"

    def teardown(self) -> None:
        """Liveness: with no new work, repeatedly finishing what runs drains every request
        that anything attached can hold, and leaves every place exactly as it started."""
        scheduler = self.scheduler
        for place in scheduler.places():
            scheduler.set_paused(place.id, False)  # every place answers again
        for _ in range(len(scheduler.waiting()) + 2):
            scheduler.schedule(NOW)
            for request_id in list(scheduler.running()):
                scheduler.finish(request_id)
        scheduler.schedule(NOW)
        for request_id in list(scheduler.running()):
            scheduler.finish(request_id)
        for place in scheduler.places():
            assert place.used == (0, 0, 0, 0)
            assert sorted(place.free_gpu_ids) == sorted(place.worker.device_ids)
        snapshot = scheduler.snapshot()
        for request in snapshot.waiting:
            need = need_of(request)
            runnable = [
                p
                for p in scheduler.places()
                if covers(p.capacity, need)
                and _in_time(p.worker, request)
                and allows_container(p.worker, request)
                and (
                    (request.label is None and p.id == ENGINE_ID)
                    or (request.label is not None and request.label in p.worker.labels)
                )
            ]
            assert not runnable, f"{request.id} starved although {runnable[0].id} could run it"


TestScheduler = against_reference(SchedulerMachine)
