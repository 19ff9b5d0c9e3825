"""What every comparison of a machine with its naive reference shares: how hard it looks."""

from __future__ import annotations

import unittest

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

__all__ = ["against_reference"]


def against_reference(
    comparison: type[RuleBasedStateMachine], *, examples: int = 300, steps: int = 40
) -> type[unittest.TestCase]:
    """The test case that runs ``comparison``: ``examples`` event sequences of up to
    ``steps`` events each, with no deadline (a loaded CI machine is slow, not wrong)."""
    comparison.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return comparison.TestCase
