"""Where inputs are cached decides as the reference says: labelled workers alike but for
their caches, free room, job ends and pipelines, against the naive planner."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fluksio.scheduler import CallRequest, Profile, Worker
from fluksio.scheduler.plan import Snapshot
from fluksio.scheduler.reference import reference_plan
from fluksio.scheduler.resources import Amounts
from fluksio.scheduler.scheduler import plan
from fluksio.scheduler.state import Allocation
from tests.support.properties import tried
from tests.support.scheduling import INPUTS, MARGIN, NOW


@settings(max_examples=tried(300), deadline=None)
@given(
    workers=st.lists(
        st.tuples(
            st.integers(1, 2),  # slots
            st.sampled_from([None, 4, 8]),  # cpus
            st.sampled_from([None, 10_000.0, 20_000.0]),  # when its job ends
            st.frozensets(st.sampled_from([d for d, _ in INPUTS])),  # its cache
            st.integers(0, 1),  # calls running there already
            st.integers(0, 2),  # calls it takes ahead
        ),
        min_size=2,
        max_size=5,
    ),
    requests=st.lists(
        st.tuples(
            st.lists(st.sampled_from(INPUTS), max_size=3, unique=True),
            st.sampled_from([None, 30.0]),
            st.sampled_from([None, 2]),
        ),
        min_size=1,
        max_size=6,
    ),
    profile=st.booleans(),
)
def test_where_inputs_are_cached_decides_as_the_reference_says(
    workers: list[tuple[int, int | None, float | None, frozenset[str], int, int]],
    requests: list[tuple[list[tuple[str, int]], float | None, int | None]],
    profile: bool,
) -> None:
    """Labelled workers alike but for their caches, free room, job ends and pipelines,
    calls naming inputs, and perhaps a profile that could bring a machine: the scheduler
    places each where the reference does, and asks what it asks."""
    places = tuple(
        Worker(
            id=f"w{i}",
            name=f"w{i}",
            labels=frozenset({"gpu"}),
            slots=slots,
            cpus=cpus,
            ram_mb=4096,
            ends_at=ends,
            pipeline=ahead,
        )
        for i, (slots, cpus, ends, _cache, _busy, ahead) in enumerate(workers)
    )
    running = tuple(
        (CallRequest(f"busy{i}", 0.0, label="gpu"), Allocation(f"w{i}", Amounts(0, 0, 0, 1), ()))
        for i, (_slots, _cpus, _ends, _cache, busy, _ahead) in enumerate(workers)
        if busy
    )
    waiting = tuple(
        CallRequest(f"r{n}", float(n), label="gpu", cpus=cpus, limit=limit, inputs=tuple(inputs))
        for n, (inputs, limit, cpus) in enumerate(requests)
    )
    cached = tuple((f"w{i}", c) for i, (*_rest, c, _busy, _ahead) in enumerate(workers) if c)
    profiles = (Profile("p", "gpu-box", frozenset({"gpu"}), cpus=8),) if profile else ()
    snapshot = Snapshot(
        places, running, waiting, profiles, cached=cached, now=NOW, walltime_margin_s=MARGIN
    )
    assert plan(snapshot) == reference_plan(snapshot)
