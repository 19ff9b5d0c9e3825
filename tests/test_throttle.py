"""The login slowdown, as pure bookkeeping with time passed in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fluksio.api.throttle import LoginGuard, LoginThrottle


def test_free_failures_then_doubling_waits_then_reset_on_success() -> None:
    throttle = LoginThrottle(free_failures=3, base_delay_s=1.0, max_delay_s=5.0)
    for second in range(3):
        assert throttle.retry_after("alice", now=second) == 0.0
        throttle.failed("alice", now=second)
    assert throttle.retry_after("alice", now=2.0) == 1.0
    assert throttle.retry_after("alice", now=3.0) == 0.0
    throttle.failed("alice", now=3.0)
    assert throttle.retry_after("alice", now=3.0) == 2.0
    for _ in range(10):
        throttle.failed("alice", now=3.0)
    assert throttle.retry_after("alice", now=3.0) == 5.0, "capped"
    assert throttle.retry_after("bob", now=3.0) == 0.0, "other keys unaffected"
    throttle.succeeded("alice")
    assert throttle.retry_after("alice", now=3.0) == 0.0


def test_memory_is_bounded_by_forgetting_the_oldest_keys() -> None:
    throttle = LoginThrottle(free_failures=1, max_keys=2)
    for key in ("a", "b", "c"):
        throttle.failed(key, now=0.0)
    assert throttle.retry_after("a", now=0.0) == 0.0
    assert throttle.retry_after("c", now=0.0) > 0.0


def test_usernames_are_throttled_case_insensitively_and_addresses_more_loosely() -> None:
    guard = LoginGuard(free_failures=2, base_delay_s=1.0, address_factor=3)
    guard.failed("Admin", "10.0.0.1", now=0.0)
    guard.failed("admin", "10.0.0.1", now=0.0)
    assert guard.retry_after("ADMIN", "10.0.0.9", now=0.0) > 0
    assert guard.retry_after("carol", "10.0.0.1", now=0.0) == 0, "address allowance is 6"


@given(
    failures=st.integers(min_value=0, max_value=40),
    elapsed=st.floats(min_value=0, max_value=1000, allow_nan=False),
)
def test_wait_is_never_negative_nor_above_the_cap(failures: int, elapsed: float) -> None:
    throttle = LoginThrottle(free_failures=5, base_delay_s=1.0, max_delay_s=300.0)
    for _ in range(failures):
        throttle.failed("k", now=0.0)
    wait = throttle.retry_after("k", now=elapsed)
    assert 0.0 <= wait <= 300.0
    assert (
        (wait == 0.0)
        if failures < 5
        else (wait == max(0.0, min(2.0 ** (failures - 5), 300.0) - elapsed))
    )


def test_a_client_that_keeps_failing_waits_the_cap_and_never_overflows() -> None:
    """Found by the retention test: a script with an expired token failed 1,100 times, and
    2.0 ** 1,095 overflowed, answering 500 instead of waiting."""
    throttle = LoginThrottle(free_failures=5, base_delay_s=1.0, max_delay_s=300.0)
    for _ in range(5_000):
        throttle.failed("k", now=0.0)
    assert throttle.retry_after("k", now=0.0) == 300.0
