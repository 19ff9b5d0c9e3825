"""The run rules as a naive model: node states recomputed from scratch after every event.

This is the specification of :class:`~.machine.RunMachine` in executable form. It keeps
no dependents lists, no counts and no call ids: after each event it sweeps every node
until nothing changes. The property tests (``tests/test_run_machine_properties.py``)
drive both with the same events and require the same states.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fluksio.wire.states import TERMINAL_NODE_STATES, NodeState, RunState

__all__ = ["ReferenceNode", "ReferenceRun", "back_with"]


RETRIED_AS = {
    "error": "NodeError",
    "timeout": "NodeTimeout",
    "limit": "NodeLimit",
    "job_end": "NodeLimit",
    "gone": "WorkerGone",
    "gone_silent": "WorkerGone",
}
"""How each way a call ends counts for a node's ``retry``."""


@dataclass
class ReferenceNode:
    after: tuple[str, ...]
    retry_on: frozenset[str] = frozenset()
    """The failures it is run again after (``retries`` is ``WorkerGone``, at once)."""
    times: int = 0
    """How many attempts after the first it may have."""
    waits: bool = False
    """Whether it waits out a back-off before each retry (``pending`` meanwhile)."""
    retry_on_restart: bool = False
    remote: bool = False
    """Its call runs on a worker, which may outlive the engine (not in the engine's own
    process)."""
    state: NodeState = NodeState.PENDING
    attempt: int = 1
    backing_off: bool = False
    max_checkpoints: int = 3
    """How many stops by its job's end (``job_end``) or its own checkpoints
    (``checkpoint``) run it again without a retry."""
    interruptions: int = 0
    crashes: int = 0
    restores: bool = False
    """A checkpoint of it was taken: every later attempt is given its state."""


@dataclass
class ReferenceRun:
    nodes: dict[str, ReferenceNode]
    cancelling: bool = False
    started: bool = False
    ended: bool = False
    queued_times: int = field(default=0)
    """How many times any node was put in the queue (first times, again after a lost
    worker, and again at a restart)."""
    crash_limit: int = 3
    """How many lost workers (``gone``) fail a node for good, whatever its retries."""

    def __post_init__(self) -> None:
        self._settle()

    def state(self) -> RunState:
        states = [node.state for node in self.nodes.values()]
        if all(state in TERMINAL_NODE_STATES for state in states):
            if self.cancelling or NodeState.CANCELLED in states:
                return RunState.CANCELLED
            if NodeState.FAILED in states or NodeState.SKIPPED in states:
                return RunState.FAILED
            return RunState.SUCCEEDED
        return RunState.RUNNING if self.started else RunState.QUEUED

    # -- events ----------------------------------------------------------------------------

    def start(self, node_id: str, *, remote: bool = False) -> None:
        """A queued node's call started on an executor (a worker's, ``remote``)."""
        assert self.nodes[node_id].state is NodeState.QUEUED
        self.nodes[node_id].state = NodeState.RUNNING
        self.nodes[node_id].remote = remote
        self.started = True

    def refuse(self, node_id: str) -> None:
        """A queued node's call was placed where a secret it names may not go."""
        assert self.nodes[node_id].state is NodeState.QUEUED
        self.nodes[node_id].state = NodeState.FAILED
        self._settle()

    def end(self, node_id: str, kind: str) -> None:
        """A running call ended: ``ok``, ``error``, ``cancelled``, ``gone`` (its worker was
        lost), ``gone_silent`` (its worker went silent, and may run it still until its
        own deadline), ``not_taken`` (its worker never took it), ``job_end`` (stopped by
        its batch job's end) or ``checkpoint`` (it saved its state and ended)."""
        node = self.nodes[node_id]
        assert node.state is NodeState.RUNNING
        if kind in ("gone", "gone_silent") and not self.cancelling:
            node.crashes += 1
            if node.crashes >= self.crash_limit:
                kind = "crashed"  # not retried, whatever its retries
        if kind == "ok":
            node.state = NodeState.SUCCEEDED
        elif kind == "not_taken" and not self.cancelling:
            node.state = NodeState.QUEUED
            self.queued_times += 1
        elif (
            kind in ("job_end", "checkpoint")
            and not self.cancelling
            and node.interruptions < node.max_checkpoints
        ):
            node.restores = node.restores or kind == "checkpoint"
            node.interruptions += 1
            node.attempt += 1
            node.state = NodeState.QUEUED
            self.queued_times += 1
        elif (
            not self.cancelling
            and RETRIED_AS.get(kind) in node.retry_on
            and node.attempt - node.interruptions <= node.times
        ):
            node.attempt += 1
            if node.waits or kind == "gone_silent":  # a second copy never runs beside it
                node.state, node.backing_off = NodeState.PENDING, True
            else:
                node.state = NodeState.QUEUED
                self.queued_times += 1
        elif kind == "cancelled" and self.cancelling:
            node.state = NodeState.CANCELLED
        else:
            node.state = NodeState.FAILED
        self._settle()

    def retry_due(self, node_id: str) -> None:
        """A node's back-off is over: its next attempt is queued."""
        node = self.nodes[node_id]
        assert node.state is NodeState.PENDING and node.backing_off
        node.backing_off = False
        node.state = NodeState.QUEUED
        self.queued_times += 1

    def cancel(self) -> None:
        self.cancelling = True
        self._settle()

    def not_back(self, node_id: str, kind: str = "gone") -> None:
        """The worker of a call running over a restart will not bring it back: it runs
        again if its node says ``retry_on_restart``, else it ended as ``kind`` says (gone,
        or ``not_taken``: its worker came back without it)."""
        node = self.nodes[node_id]
        if node.retry_on_restart and not self.cancelling:
            assert node.state is NodeState.RUNNING
            node.state = NodeState.PENDING
            node.attempt += 1
            self._settle()
        else:
            self.end(node_id, kind)

    def restart(self) -> None:
        """The engine restarted: what ran in its process is lost (or runs again if its
        node says so); what ran on a worker runs on, awaited (unless its run was being
        cancelled).

        A cancel survives a restart only through what it left in the store: a node it
        cancelled. (One whose every node was running when cancelled carries on.)
        """
        self.cancelling = any(n.state is NodeState.CANCELLED for n in self.nodes.values())
        for node in self.nodes.values():
            if node.state is NodeState.RUNNING and node.remote and not self.cancelling:
                pass  # awaited: adopted when its worker is back, or not_back
            elif node.state is NodeState.RUNNING and node.retry_on_restart:
                node.state = NodeState.PENDING
                node.attempt += 1  # run again from its start: a new attempt
            elif node.state is NodeState.RUNNING:
                node.state = NodeState.FAILED
            elif node.state is NodeState.QUEUED:
                node.state = NodeState.PENDING  # queued again below, at its old turn
            node.backing_off = False  # a back-off is not kept: it is queued at once
        self._settle()

    # -- the sweep -------------------------------------------------------------------------

    def _settle(self) -> None:
        changed = True
        while changed:
            changed = False
            for node in self.nodes.values():
                new = self._next(node)
                if new is not None:
                    node.state = new
                    changed = True
                    if new is NodeState.QUEUED:
                        self.queued_times += 1

    def _next(self, node: ReferenceNode) -> NodeState | None:
        if node.state not in (NodeState.PENDING, NodeState.QUEUED):
            return None
        if self.cancelling:
            node.backing_off = False
            node.attempt = max(1, node.attempt - 1)  # it shows the last attempt that ran
            return NodeState.CANCELLED  # what has not started never will
        if node.state is NodeState.QUEUED or node.backing_off:
            return None
        dependencies = [self.nodes[d].state for d in node.after]
        if any(s in TERMINAL_NODE_STATES - {NodeState.SUCCEEDED} for s in dependencies):
            return NodeState.SKIPPED
        if all(s is NodeState.SUCCEEDED for s in dependencies):
            return NodeState.QUEUED
        return None


def back_with(
    held_by: tuple[str, str, str | None],
    back: tuple[str, str, str | None],
    named: set[str],
    call_id: str,
) -> str | None:
    """What becomes of a call awaited since a restart, held by worker ``held_by`` (token,
    name, process), when worker ``back`` attaches naming ``named``: None, nothing (it is
    another worker's); ``adopt``; ``not_taken`` (its worker back without it);
    ``started_again`` (its worker's process is another: the call died with the old). Our
    agent's hello always names what it holds."""
    if held_by[0] != back[0] or held_by[1] != back[1]:
        return None  # another token or another name: none of its business
    if held_by[2] != back[2]:
        return "started_again"
    return "adopt" if call_id in named else "not_taken"
