"""Numbers on a command line: finite and within their bounds.

``float()`` reads ``nan``, ``inf`` and ``1e400`` (as infinity), and click's ``FloatRange``
lets ``nan`` through every bound (it compares false with everything). A setting that must be
a number of seconds refuses them like any other value out of range, naming its flag or
variable. Shared by ``fluksio-worker`` and ``fluksio serve``.
"""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["FiniteRange"]


class FiniteRange(click.FloatRange):
    """A float between ``minimum`` and ``maximum`` (both required), never nan or infinite."""

    name = "number"

    def __init__(self, minimum: float, maximum: float, *, min_open: bool = False) -> None:
        super().__init__(minimum, maximum, min_open=min_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)
