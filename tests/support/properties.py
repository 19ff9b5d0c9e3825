"""What every comparison of a machine with its naive reference shares: how hard it looks."""

from __future__ import annotations

import os
import unittest

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

__all__ = ["against_reference", "tried"]

FAST = os.environ.get("FLUKSIO_TESTS") == "fast"
"""The inner loop (``make test-fast``): every property looks a tenth as hard there, and
with its full count in ``make test``, which CI runs."""


def tried(full: int) -> int:
    """How many examples a property tries: ``full``, or a tenth (at least 20) when fast."""
    return max(20, full // 10) if FAST else full


def against_reference(
    comparison: type[RuleBasedStateMachine], *, examples: int = 300, steps: int = 40
) -> type[unittest.TestCase]:
    """The test case that runs ``comparison``: ``examples`` event sequences (fewer when
    fast) of up to ``steps`` events each, with no deadline (a loaded CI machine is slow,
    not wrong)."""
    comparison.TestCase.settings = settings(
        max_examples=tried(examples),
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    return comparison.TestCase
