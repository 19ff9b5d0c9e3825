"""The states of runs and of the nodes in them: one enum each, stored as their values.

A node: ``pending`` (waiting for its dependencies) -> ``queued`` (a call in the scheduler;
it says why it waits) -> ``running`` (on an executor) -> ``succeeded`` | ``failed`` |
``cancelled``; or ``skipped`` when a dependency did not succeed. A run is ``queued``
until its first node starts, then ``running``, then ``succeeded``, ``failed`` (some node
failed or was skipped) or ``cancelled``.
"""

from __future__ import annotations

import enum

__all__ = ["TERMINAL_NODE_STATES", "TERMINAL_RUN_STATES", "NodeState", "RunState"]


class NodeState(enum.StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class RunState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_NODE_STATES = frozenset(
    {NodeState.SUCCEEDED, NodeState.FAILED, NodeState.CANCELLED, NodeState.SKIPPED}
)
TERMINAL_RUN_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED})
