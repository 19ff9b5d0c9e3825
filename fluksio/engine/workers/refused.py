"""A worker refused for its protocol, as the engine remembers it: plain data.

The registry keeps a bounded number of them per token; the stream's ``WorkerRefused``
carries one; ``GET /workers`` and the live feed show them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NeedsUpgrade"]


@dataclass(frozen=True)
class NeedsUpgrade:
    """A worker refused for its protocol, from bounded fields of its hello only (the
    caller bounds them: a name by the name rule, short texts, the protocol a number)."""

    name: str
    protocol: int | None
    version: str | None
    python: str | None
    refused_at: float
    reason: str
    jti: str = ""
    """The token it used: each token may fill at most the registry's ``REFUSED_PER_TOKEN``
    entries."""
