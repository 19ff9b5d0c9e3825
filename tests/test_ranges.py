"""``Ranges`` holds what a set of positions would, as merged ranges (its naive reference:
a set), whatever is added, asked or dropped in whatever order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fluksio.engine.runs.machine.ranges import Ranges, runs_of

Step = tuple[str, list[int]]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 60), max_size=12)),
        st.tuples(st.just("drop"), st.lists(st.integers(0, 60), min_size=1, max_size=1)),
    ),
    max_size=20,
)


@given(steps)
def test_ranges_hold_what_a_set_would(done: list[Step]) -> None:
    ranges, reference = Ranges(), set[int]()
    for what, positions in done:
        if what == "add":
            new = ranges.add(positions)
            assert [p for low, high in new for p in range(low, high + 1)] == sorted(
                set(positions) - reference
            )
            reference |= set(positions)
        else:
            ranges.drop_below(positions[0])
            reference = {p for p in reference if p >= positions[0]}
        assert [p for p in range(62) if p in ranges] == sorted(reference)
        assert len(ranges) == len(reference)
        assert ranges.spans() == runs_of(reference), "merged: the fewest ranges"
