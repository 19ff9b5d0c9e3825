"""Failures counted by their cause, on the run machine itself (no I/O, no clock): a stop by
its batch job's end runs the call again without spending a retry, ``max_checkpoints``
times; a call whose worker died under it ``crash_limit`` times fails
``NodeCrashedWorkers`` naming each worker and job, whatever retries it has left."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.db import open_database
from fluksio.engine.runs.items import ItemStore
from fluksio.engine.runs.machine.effects import Effect, Queue
from fluksio.engine.runs.machine.rows import Earlier, NodeRow, RunRow
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.runs.store import RunStore
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import NodeState, RunState

CODE = "def process():\n    return 1\n"
JOB_END = CallOutcome(
    False,
    error=error_record(ErrorKind.NODE_LIMIT, "ran until Slurm job 41 had 30 s left"),
    interrupted=True,
)
GONE = CallOutcome(False, error=error_record(ErrorKind.WORKER_GONE, "worker went away mid-call"))
BOOM = CallOutcome(
    False, error={"type": "ValueError", "message": "boom", "short": "", "traceback": ""}
)


class OneNode:
    """One run of one node, each call placed at once on the next worker."""

    def __init__(self, node: dict[str, Any], crash_limit: int = 3) -> None:
        ids = itertools.count()
        self.machine = RunMachine(lambda: f"c{next(ids)}", crash_limit)
        self.now = 1_000.0
        self.workers = (f"hpc-small-{n}" for n in itertools.count(1))
        self.jobs = itertools.count(41)
        self.queued: list[str] = []
        self._apply(self.machine.start("r", "flow", {"nodes": [{"code": CODE, **node}]}, {}, 0))

    def _apply(self, effects: list[Effect]) -> None:
        self.queued += [effect.request.id for effect in effects if isinstance(effect, Queue)]

    def run_once(self, outcome: CallOutcome) -> NodeRow:
        """Its queued call placed on a new worker in a new job, and ended so: the node's
        row after."""
        (call_id,) = self.queued
        self.queued.clear()
        self.now += 10
        worker = next(self.workers)
        where = Provenance(worker=worker, batch_job=f"Slurm job {next(self.jobs)}")
        self.machine.placed(call_id, worker, where, self.now)
        self._apply(self.machine.running(call_id, ()))
        self._apply(self.machine.ended(call_id, outcome, self.now))
        return self.row

    @property
    def row(self) -> NodeRow:
        snapshot = self.machine.snapshot("r")
        assert snapshot is not None
        (node,) = snapshot[1]
        return node.row


def test_a_stop_by_its_jobs_end_runs_it_again_without_spending_a_retry() -> None:
    node = OneNode(
        {
            "id": "n",
            "max_checkpoints": 2,
            "retry": {"on": ["NodeError"], "times": 1, "backoff_s": 0},
        }
    )
    node.run_once(JOB_END)
    second = node.run_once(JOB_END)
    assert second.state is NodeState.QUEUED and second.attempt == 3
    assert second.interruptions == 2
    third = node.run_once(BOOM)  # its one retry is still there
    assert third.state is NodeState.QUEUED and third.attempt == 4
    last = node.run_once(BOOM)
    assert last.state is NodeState.FAILED and last.error is not None
    assert last.error["message"] == "boom"


def test_past_max_checkpoints_a_stop_by_its_jobs_end_fails_as_a_limit() -> None:
    node = OneNode({"id": "n", "max_checkpoints": 1})
    node.run_once(JOB_END)
    last = node.run_once(JOB_END)
    assert last.state is NodeState.FAILED and last.error is not None
    assert last.error["type"] == "NodeLimit" and last.attempt == 2
    # The bound the user hit, named: how often, and the setting.
    assert last.error["message"] == (
        "ran until Slurm job 41 had 30 s left (stopped so 2 times; its max_checkpoints is 1)"
    )


def test_a_call_that_kills_its_workers_fails_at_the_crash_limit_naming_each() -> None:
    node = OneNode({"id": "n", "retries": 5})
    node.run_once(GONE)
    second = node.run_once(GONE)
    assert second.state is NodeState.QUEUED, "retried after each of the first two"
    last = node.run_once(GONE)
    assert last.state is NodeState.FAILED and last.error is not None
    assert last.error["type"] == "NodeCrashedWorkers"
    assert last.error["message"] == (
        "its worker died under it 3 times (hpc-small-1 in Slurm job 41; hpc-small-2 in"
        " Slurm job 42; hpc-small-3 in Slurm job 43); not sent to another machine (the"
        " engine's crash_limit is 3)"
    )
    assert node.queued == [], "not sent to another machine"


def test_without_retries_a_lost_worker_fails_the_call_at_once_as_before() -> None:
    node = OneNode({"id": "n"}, crash_limit=3)
    last = node.run_once(GONE)
    assert last.state is NodeState.FAILED and last.error is not None
    assert last.error["type"] == "WorkerGone"
    assert last.crashes == ("hpc-small-1 in Slurm job 41",)


def test_how_a_calls_attempts_were_spent_is_stored_for_the_next_engine(tmp_path: Path) -> None:
    """A node's and an array item's counts are read back as written: a restarted engine
    goes on from them, for a node from its row, for an item from its page."""
    database = open_database(tmp_path / "state.sqlite3")
    runs, items = RunStore(database), ItemStore(database)
    crashes = ("w1 in Slurm job 41",)
    run = RunRow("r", "flow", {"nodes": []}, {}, RunState.RUNNING, 0.0)
    runs.create(run, [NodeRow("n", NodeState.PENDING), NodeRow("a", NodeState.RUNNING)])
    saved = ArtifactRef(digest="sha256:" + "ab" * 32, size=3, media_type="application/json")
    spent = functools.partial(
        NodeRow, attempt=4, interruptions=2, crashes=crashes, checkpoint=saved
    )
    node = spent("n", NodeState.QUEUED)
    item = spent("a", NodeState.PENDING, item=7)
    runs.save_nodes("r", [node, item])
    found = runs.get("r")
    assert found is not None
    (stored,) = [n for n in found[1] if n.node_id == "n"]
    assert (stored.attempt, stored.interruptions, stored.crashes) == (4, 2, crashes)
    assert stored.checkpoint == saved, "the next attempt, after a restart, restores it"
    assert items.states("r", "a", 0, 10)[7] == Earlier("pending", 4, 2, crashes, saved)
    assert "ab" * 32 in runs.referenced_digests(), "its state is kept from retention"
    database.close()
