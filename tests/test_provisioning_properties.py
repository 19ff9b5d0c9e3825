"""``max_workers`` is a cap at every instant, whatever happens: a property test.

Hypothesis drives the provisioning driver through sequences of what the outside world
does (calls asking for machines, workers attaching with short walltimes and leaving, jobs
starting and ending by themselves, submissions whose answer is lost, time passing, the
engine killed and started again on what it had written down) against the scripted
provisioner. After every step, the jobs alive in the outside system (submitted, pending
or running) never exceed the profile's ``max_workers``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluksio.provisioners.base import TERMINAL_STATES, JobState, JobStatus, WorkerRecord
from fluksio.provisioners.driver import ProvisioningDriver
from fluksio.provisioners.machine.requests import RequestStage
from tests.support.clock import ManualClock
from tests.support.properties import tried
from tests.support.scripted import RecordingEngine, Scripted, scripted_settings

STEPS = st.lists(
    st.one_of(
        st.just(("want",)),
        st.tuples(st.just("attach"), st.integers(0, 3), st.sampled_from([20.0, 90.0, None])),
        st.tuples(st.just("leave"), st.integers(0, 3)),
        st.tuples(st.just("start"), st.integers(0, 3)),
        st.tuples(st.just("end"), st.integers(0, 3)),
        st.just(("lose-answer",)),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 5.0, 30.0, 400.0])),
        st.just(("restart",)),
    ),
    max_size=40,
)


@dataclass
class World:
    provisioner: Scripted
    engine: RecordingEngine = field(default_factory=RecordingEngine)
    clock: ManualClock = field(default_factory=ManualClock)
    attached: dict[str, WorkerRecord] = field(default_factory=dict)
    driver: ProvisioningDriver | None = None

    def start(self) -> ProvisioningDriver:
        self.driver = ProvisioningDriver(
            [self.provisioner], self.engine, on_change=self.engine.changed, clock=self.clock
        )
        self.driver.recover(list(self.engine.stored.values()))
        return self.driver

    def alive(self) -> int:
        return sum(s.state not in TERMINAL_STATES for s in self.provisioner.jobs.values())


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _play(steps: list[tuple[object, ...]], max_workers: int) -> None:
    provisioner = Scripted(
        scripted_settings(
            poll_interval_s=5,
            provision_timeout_s=60,
            retry_base_s=1,
            profiles=[{"name": "small", "labels": ["hpc"], "max_workers": max_workers}],
        )
    )
    world = World(provisioner)
    driver = world.start()
    for step in steps:
        kind = step[0]
        jobs = sorted(provisioner.jobs, key=int)
        if kind == "want":
            driver.want("box", "small")
        elif kind == "attach":
            pending = [
                request
                for request in driver.profiles()[0].jobs
                if request.job_id is not None and request.stage is not RequestStage.ATTACHED
            ]
            if pending:
                request = pending[int(step[1]) % len(pending)]  # type: ignore[call-overload]
                left = step[2]
                event = WorkerRecord(
                    f"w-{request.id}", "box-small", ("hpc",), "box", "small", request.id,
                    request.job_id,
                    None if left is None else time.time() + float(left),  # type: ignore[arg-type]
                )  # fmt: skip
                world.attached[event.worker_id] = event
                driver.worker_attached(event)
        elif kind == "leave" and world.attached:
            worker_id = sorted(world.attached)[int(step[1]) % len(world.attached)]  # type: ignore[call-overload]
            driver.worker_gone(world.attached.pop(worker_id))
        elif kind in ("start", "end") and jobs:
            job = jobs[int(step[1]) % len(jobs)]  # type: ignore[call-overload]
            if provisioner.jobs[job].state not in TERMINAL_STATES:
                state = JobState.RUNNING if kind == "start" else JobState.COMPLETED
                provisioner.jobs[job] = JobStatus(state, state.name)
        elif kind == "lose-answer":
            provisioner.lose_answer = True
        elif kind == "advance":
            world.clock.advance(float(step[1]))  # type: ignore[arg-type]
        elif kind == "restart":
            # Killed: nothing is cancelled, its timers die with it; what it wrote down
            # (engine.stored) and the outside system stay.
            world.clock = ManualClock(world.clock.now())
            world.attached.clear()
            driver = world.start()
        await _settle()
        assert world.alive() <= max_workers, (
            f"{world.alive()} jobs alive with max_workers {max_workers} after {step}"
        )


@settings(max_examples=tried(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, max_workers=st.integers(1, 3))
def test_jobs_alive_never_exceed_max_workers(
    steps: list[tuple[object, ...]], max_workers: int
) -> None:
    asyncio.run(_play(steps, max_workers))
