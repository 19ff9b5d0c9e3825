"""The run machine's retries: a failed call run again, at once or after a back-off.

A part of :class:`~fluksio.engine.runs.machine.run_machine.RunMachine`, on its
:class:`~fluksio.engine.runs.machine.book.RunBook`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.machine.book import Moves, RunBook
from fluksio.engine.runs.machine.effects import Effect, Log, RetryAt, Save
from fluksio.engine.runs.machine.redact import redact
from fluksio.engine.runs.machine.state import LiveNode, LiveRun
from fluksio.wire.flows import RetryKind
from fluksio.wire.states import NodeState

__all__ = ["Retries", "failure_kind", "most_attempts"]


class Retries:
    """A failed call run again: at once, or after its back-off."""

    def __init__(self, book: RunBook, moves: Moves) -> None:
        self._book = book
        self._moves = moves

    def retry_due(
        self, run_id: str, node_id: str, now: float, item: int | None = None
    ) -> list[Effect]:
        """A node's (or an item's) back-off is over: queue its next attempt (unless it
        ended meanwhile)."""
        run = self._book.runs.get(run_id)
        node = run.nodes.get(node_id) if run is not None else None
        if item is not None:
            node = node.array.items.get(item) if node is not None and node.array else None
        if run is None or node is None or node.retry_at is None or run.cancelling:
            return []
        node.retry_at = None
        effects: list[Effect] = []
        self._moves.queue(run, node, node.row.queued_at or now, effects)  # its place in line
        if item is not None:
            self._moves.item_moved(run, node, NodeState.PENDING, now, effects)  # saves it
        else:
            effects.append(Save(run.row, (node.row,)))
        return effects

    def counted(self, run: LiveRun, node: LiveNode, outcome: CallOutcome) -> CallOutcome:
        """A stop not of its doing past its ``max_checkpoints`` says so. A call whose
        worker died under it (``WorkerGone``: killed, out of memory, its job failed): one
        more crash, where it ran. At the engine's ``crash_limit`` it fails
        ``NodeCrashedWorkers`` instead, naming each: it is not sent to another machine,
        whatever its retries."""
        error = outcome.error or {}
        if outcome.interrupted and node.row.interruptions >= node.spec.max_checkpoints:
            return _checkpoints_spent(outcome, node)
        if outcome.ok or run.cancelling or error.get("type") != ErrorKind.WORKER_GONE:
            return outcome
        node.row.crashes = (*node.row.crashes, _where(node))
        if len(node.row.crashes) < self._book.crash_limit:
            return outcome
        said = (
            f"its worker died under it {len(node.row.crashes)} times"
            f" ({'; '.join(node.row.crashes)}); not sent to another machine"
            f" (the engine's crash_limit is {self._book.crash_limit})"
        )
        return dataclasses.replace(
            outcome, error=error_record(ErrorKind.NODE_CRASHED_WORKERS, said)
        )

    def retry(
        self, run: LiveRun, node: LiveNode, outcome: CallOutcome, now: float, effects: list[Effect]
    ) -> bool:
        """Queue the node again when its worker never took it, or when it failed in a way
        its ``retry`` (or ``retries``) chose and has attempts left: at once, or after its
        back-off (``pending`` meanwhile, with a :class:`RetryAt`).

        A lost call's late answer, if its worker ever sends one, is ignored: the node
        keeps exactly one result, the first its run receives.
        """
        error = outcome.error or {}
        if outcome.ok or run.cancelling or node.cancelling:
            return False
        # A call its worker never took (it froze first) never ran: it simply goes back in
        # line, whatever its retries, and spends no attempt.
        never_ran = error.get("type") == ErrorKind.NOT_TAKEN
        # Stopped by its job's end or its worker's, or ended by its own checkpoint: run again
        # on another, a new attempt but no retry.
        interrupted = outcome.interrupted and node.row.interruptions < node.spec.max_checkpoints
        policy = node.spec.retry_policy()
        wait = 0.0
        if interrupted:
            node.row.interruptions += 1
            node.row.attempt += 1
            node.row.ended_at = now
            if outcome.checkpoint is not None:  # given back to every later attempt
                node.row.checkpoint = outcome.checkpoint
        elif not never_ran:
            retried = node.row.attempt - node.row.interruptions  # the retries it spent, +1
            if (
                policy is None
                or failure_kind(error.get("type")) not in policy.on
                or retried > policy.times
            ):
                return False
            wait = _not_before(policy.wait_before(retried), outcome, now)
            node.row.attempt += 1
            node.row.ended_at = now  # the attempt's end, its duration while the next waits
        error = redact(error, node.secrets)  # it is shown, in its events and meanwhile
        node.secrets = ()
        said = error.get("short") or error.get("message")
        fields: dict[str, Any] = {"run_id": run.row.id, "node": node.spec.id, "after": said}
        what = "requeued" if never_ran else "interrupted" if interrupted else "retried"
        if interrupted:
            fields.update(attempt=node.row.attempt, interruption=node.row.interruptions)
            fields.update(of=node.spec.max_checkpoints, on=_where(node))
            if outcome.checkpoint is not None:
                what = "checkpointed"
                fields.update(state=dataclasses.asdict(outcome.checkpoint))
        elif not never_ran:
            assert policy is not None
            most = policy.times + 1 + node.row.interruptions
            fields.update(attempt=node.row.attempt, of=most, in_s=wait)
        effects.append(Log(f"call.{what}", fields))
        outputs = {k: v for k, v in fields.items() if k not in ("run_id", "node")}
        node.note(what, now, **outputs)
        if wait > 0:
            node.row.state = NodeState.PENDING
            node.row.error = error
            node.retry_at = now + wait
            effects.append(RetryAt(run.row.id, node.spec.id, node.retry_at, node.row.item))
        else:
            self._moves.queue(run, node, node.row.queued_at or now, effects)  # its place in line
        effects.append(Save(run.row, (node.row,)))
        return True


def _not_before(wait: float, outcome: CallOutcome, now: float) -> float:
    """A retry's wait: its back-off, and, for a call lost with its worker's connection
    that may run there still, until the worker's deadline: a second copy never starts
    while the first may."""
    if outcome.may_run_until is None:
        return wait
    return max(wait, outcome.may_run_until - now)


def _checkpoints_spent(outcome: CallOutcome, node: LiveNode) -> CallOutcome:
    """An interrupted call not run again: its error says how often it was stopped so, and
    the setting that ended it."""
    error = dict(outcome.error or {})
    stops = node.row.interruptions + 1
    times = f"{stops} time" + ("s" if stops != 1 else "")
    how = "checkpointed" if outcome.checkpoint is not None else "stopped so"
    said = f" ({how} {times}; its max_checkpoints is {node.spec.max_checkpoints})"
    for key in ("message", "short"):
        error[key] = error.get(key, "") + said
    return dataclasses.replace(outcome, error=error)


def _where(node: LiveNode) -> str:
    """Where a call ran, for a sentence: its worker, and the batch job it ran in."""
    provenance = node.row.provenance
    if provenance is None:
        return node.row.place or "a worker"
    job = provenance.job
    return f"{provenance.worker} in {job}" if job else provenance.worker


def failure_kind(error_type: str | None) -> RetryKind | None:
    """How a call's error counts for ``retry``: a kind the engine or agent gives counts
    only as listed in :data:`_RETRIED_AS` (a new kind is never retried until it is listed
    there); any other type is the node's own exception's name, a ``NodeError``."""
    if error_type in _RETRIED_AS:
        return _RETRIED_AS[error_type]
    if error_type in _GIVEN_KINDS:
        return None  # a cancel, a skip, a refused secret, the engine's own trouble, ...
    return "NodeError"


_RETRIED_AS: dict[str | None, RetryKind] = {
    ErrorKind.NODE_TIMEOUT: "NodeTimeout",
    ErrorKind.NODE_LIMIT: "NodeLimit",
    ErrorKind.WORKER_GONE: "WorkerGone",
    ErrorKind.REMOTE_ERROR: "NodeError",  # its process died: the node's own failure
    ErrorKind.NODE_OUT_OF_MEMORY: "NodeError",  # it held more than it asked for
    ErrorKind.INTERRUPTED: "WorkerGone",  # its worker stopped, past its max_checkpoints
}
"""The kinds the engine or agent gives that are a failure of the node, as ``retry`` names
them."""
_GIVEN_KINDS = frozenset(kind.value for kind in ErrorKind)


def most_attempts(flow: dict[str, Any]) -> dict[str, int]:
    """How many attempts each node of a stored flow may have (only those with more than
    one): read from the stored JSON without validating the whole flow again."""
    found = {}
    for node in flow.get("nodes", []):
        retry = node.get("retry")
        times = retry["times"] if retry else node.get("retries", 0)
        if times:
            found[node["id"]] = times + 1
    return found
