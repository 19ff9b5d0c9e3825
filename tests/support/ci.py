"""What a test does when something it needs is not on this machine: it skips on a laptop,
and fails under ``CI=true``, where everything ``make test`` sets up must be there (CI must
not skip)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["cannot_run"]


def cannot_run(message: str) -> NoReturn:
    """Skip with ``message``; fail with it under ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)
