"""The run machine against its naive reference, over event sequences Hypothesis draws.

Runs of random flows (dependencies, ``retries`` or ``retry``, ``retry_on_restart``) are started,
placed, refused a secret, ended every way a call ends, cancelled, and taken over by a new
machine after a restart from what the effects wrote, never from the old machine's memory.
After every event both must agree on every node's and run's state, and the effects must
keep the promises the dispatcher relies on:

- a call ends in exactly one terminal state, and stays there;
- it is queued again only after a failure its ``retry`` (or ``retries``) chose with
  attempts left (at once, or when its announced back-off is due), ``NotTaken``, or a
  restart (the reference counts each);
- the queue holds exactly the queued nodes' calls, each id new;
- what the effects wrote is what the machine holds: nothing is lost at a restart;
- a run's end is announced once, when its last node ends; each placed call is released
  once.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record
from fluksio.engine.runs.machine.effects import (
    AwaitWorker,
    Create,
    Effect,
    Ended,
    Progress,
    Queue,
    Release,
    RetryAt,
    Save,
    Stop,
    Withdraw,
)
from fluksio.engine.runs.machine.reference import RETRIED_AS, ReferenceNode, ReferenceRun, back_with
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.workers.connection.holder import Holder, sort_back
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import TERMINAL_NODE_STATES, TERMINAL_RUN_STATES, NodeState
from tests.support.properties import against_reference

CODE = "def process():\n    return 1\n"
OUTCOMES = {
    "ok": CallOutcome(True, result=1),
    "error": CallOutcome(
        False, error={"type": "ValueError", "message": "boom", "short": "", "traceback": ""}
    ),
    "cancelled": CallOutcome(
        False, error=error_record(ErrorKind.NODE_CANCELLED, "the call was cancelled")
    ),
    "gone": CallOutcome(False, error=error_record(ErrorKind.WORKER_GONE, "the worker went away")),
    "gone_silent": CallOutcome(
        False, error=error_record(ErrorKind.WORKER_GONE, "no message from the worker for 90 s")
    ),
    "not_taken": CallOutcome(
        False, error=error_record(ErrorKind.NOT_TAKEN, "the worker never took it")
    ),
    "timeout": CallOutcome(False, error=error_record(ErrorKind.NODE_TIMEOUT, "silent 5 s")),
    "limit": CallOutcome(False, error=error_record(ErrorKind.NODE_LIMIT, "ran for 5 s")),
    "job_end": CallOutcome(
        False, error=error_record(ErrorKind.NODE_LIMIT, "ran until its job's end"), interrupted=True
    ),
    "checkpoint": CallOutcome(
        False,
        error=error_record(ErrorKind.CHECKPOINTED, "it saved its state"),
        interrupted=True,
        checkpoint=ArtifactRef(digest="sha256:" + "5e" * 32, size=2),
    ),
}
CRASH_LIMIT = 2
"""Lower than the engine's own, so that Hypothesis reaches it often."""
WORKERS = {"box-1": Holder("t1", "box", "p1"), "box-2": Holder("t2", "box", "p2")}
"""Two workers of one name (as two jobs of one Slurm profile), each on a token of its own."""
COMING_BACK = {
    **WORKERS,
    "box-1 started again": Holder("t1", "box", "p9"),
    "another token named box": Holder("t3", "box", "p3"),
    "box-1's token named thief": Holder("t1", "thief", "p1"),
}


@st.composite
def flows(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 5))
    nodes = []
    for index in range(count):
        earlier = st.sampled_from(range(max(index, 1)))
        after = draw(st.lists(earlier, max_size=min(index, 2), unique=True))
        node: dict[str, Any] = {
            "id": f"n{index}",
            "code": CODE,
            "after": [f"n{i}" for i in after],
            "retry_on_restart": draw(st.booleans()),
            "max_checkpoints": draw(st.integers(0, 2)),
        }
        if draw(st.booleans()):
            node["retries"] = draw(st.integers(0, 2))
        else:
            kinds = st.sampled_from(sorted(RETRIED_AS.values()))
            node["retry"] = {
                "on": draw(st.lists(kinds, min_size=1, max_size=4, unique=True)),
                "times": draw(st.integers(1, 2)),
                "backoff_s": draw(st.sampled_from([0.0, 5.0])),
            }
        nodes.append(node)
    return nodes


def _reference_node(node: dict[str, Any]) -> ReferenceNode:
    after = tuple(node["after"])
    retry = node.get("retry")
    if retry is None:
        retries = node.get("retries", 0)
        kinds = frozenset({"WorkerGone"}) if retries else frozenset()
        return ReferenceNode(
            after,
            kinds,
            retries,
            False,
            node["retry_on_restart"],
            max_checkpoints=node["max_checkpoints"],
        )
    waits = retry["backoff_s"] > 0
    return ReferenceNode(
        after,
        frozenset(retry["on"]),
        retry["times"],
        waits,
        node["retry_on_restart"],
        max_checkpoints=node["max_checkpoints"],
    )


class RunMachineComparison(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ids = (f"c{i}" for i in itertools.count())
        self.machine = RunMachine(lambda: next(self.ids), CRASH_LIMIT)
        self.now = 1_000.0
        self.reference: dict[str, ReferenceRun] = {}
        self.stored: dict[str, tuple[RunRow, dict[str, NodeRow]]] = {}
        self.queue: dict[str, tuple[str, str]] = {}
        """Call id -> (run, node), as the scheduler would hold them."""
        self.running: dict[str, tuple[str, str]] = {}
        self.seen_calls: set[str] = set()
        self.queued_times: dict[str, int] = {}
        self.ended: set[str] = set()
        self.terminal: dict[tuple[str, str], NodeState] = {}
        self.progress: dict[str, int] = {}
        self.awaited: dict[str, Holder | None] = {}
        """Calls a restart found running on a worker, not yet adopted or given up, and
        who holds each."""
        self.holders: dict[str, Holder] = {}
        """Who holds each call placed on a worker, as placed."""
        self.retry_at: set[tuple[str, str]] = set()
        """Nodes the machine said wait out a back-off (``RetryAt``), and not yet due."""

    # -- carrying effects out, as the dispatcher would -----------------------------------

    def apply(self, effects: list[Effect]) -> None:
        saved: set[str] = set()
        for effect in effects:
            if isinstance(effect, Create):
                self.stored[effect.row.id] = (
                    dataclasses.replace(effect.row),
                    {n.node_id: dataclasses.replace(n) for n in effect.nodes},
                )
            elif isinstance(effect, Save):
                row, nodes = self.stored[effect.row.id]
                if effect.run_changed:
                    row = dataclasses.replace(effect.row)
                nodes.update({n.node_id: dataclasses.replace(n) for n in effect.nodes})
                self.stored[effect.row.id] = (row, nodes)
                saved.add(effect.row.id)
            else:
                self._carry(effect)
        for run_id in saved:  # the dispatcher tells it once the rows are written
            self.machine.written(run_id)

    def _carry(self, effect: Effect) -> None:
        """An effect other than a write, carried out and checked."""
        if isinstance(effect, Queue):
            call_id = effect.request.id
            assert call_id not in self.seen_calls, "a call id is never reused"
            self.seen_calls.add(call_id)
            found = self.machine.call(call_id)
            assert found is not None
            run, spec, _row = found
            self.queue[call_id] = (run.id, spec.id)
            self.queued_times[run.id] = self.queued_times.get(run.id, 0) + 1
        elif isinstance(effect, Withdraw):
            assert self.queue.pop(effect.call_id, None) is not None, "withdrawn while queued"
        elif isinstance(effect, Release):
            assert self.running.pop(effect.call_id, None) is not None, "released once"
        elif isinstance(effect, Stop):
            assert effect.call_id in self.running, "only a running call is stopped"
        elif isinstance(effect, Ended):
            assert effect.row.id not in self.ended, "a run ends once"
            assert effect.row.state in TERMINAL_RUN_STATES
            self.ended.add(effect.row.id)
        elif isinstance(effect, RetryAt):
            assert effect.at > self.now, "a back-off ends later"
            live = self.machine.snapshot(effect.run_id)
            if live is not None and effect.item is None:
                row = next(n.row for n in live[1] if n.row.node_id == effect.node_id)
                silent = str((row.error or {}).get("message", "")).startswith("no message")
                assert not silent or effect.at >= self.now + 50, "not before the deadline"
            self.retry_at.add((effect.run_id, effect.node_id))
        elif isinstance(effect, AwaitWorker):
            call_id = effect.request.id
            found = self.machine.call(call_id)
            assert found is not None and found[2].state is NodeState.RUNNING
            assert (effect.worker, found[2].place) == ("box", "box")
            assert effect.holder == self.holders[call_id], "the holder it was placed with"
            self.running[call_id] = (found[0].id, found[1].id)  # awaited, running on
            self.awaited[call_id] = effect.holder
        elif isinstance(effect, Progress):
            # A node's count goes on over its calls (a retry is an event of its own).
            key = f"{effect.row.id}/{effect.node.node_id}"
            assert effect.count > self.progress.get(key, 0)
            self.progress[key] = effect.count

    # -- events ------------------------------------------------------------------------

    @precondition(lambda self: len(self.reference) < 3)
    @rule(nodes=flows())
    def start_run(self, nodes: list[dict[str, Any]]) -> None:
        run_id = f"r{len(self.reference)}"
        self.now += 1
        self.apply(self.machine.start(run_id, "flow", {"nodes": nodes}, {}, self.now))
        nodes_of = {n["id"]: _reference_node(n) for n in nodes}
        self.reference[run_id] = ReferenceRun(nodes_of, crash_limit=CRASH_LIMIT)

    @precondition(lambda self: bool(self.queue))
    @rule(
        data=st.data(),
        refused=st.booleans(),
        where=st.sampled_from(["engine", *WORKERS]),
    )
    def place(self, data: st.DataObject, refused: bool, where: str) -> None:
        """Placed on the engine, or on one of two workers of one name (``box``)."""
        call_id = data.draw(st.sampled_from(sorted(self.queue)))
        run_id, node_id = self.queue.pop(call_id)
        self.running[call_id] = (run_id, node_id)  # placed: it holds its place until released
        self.now += 1
        holder = WORKERS.get(where)
        place = "box" if where in WORKERS else where
        if holder is not None:
            self.holders[call_id] = holder
        provenance = Provenance(worker=place)
        inputs = self.machine.placed(call_id, place, provenance, self.now, holder)
        assert inputs.spec.id == node_id
        if refused:
            denied = CallOutcome(False, error=error_record(ErrorKind.SECRET_DENIED, "not here"))
            self.apply(self.machine.ended(call_id, denied, self.now))
            self.reference[run_id].refuse(node_id)
        else:
            self.apply(self.machine.running(call_id, ()))
            self.reference[run_id].start(node_id, remote=holder is not None)

    def _executing(self) -> list[str]:
        """Running calls whose executor holds them (not those awaiting their worker)."""
        return sorted(set(self.running) - self.awaited.keys())

    @precondition(lambda self: bool(self._executing()))
    @rule(data=st.data(), kind=st.sampled_from(sorted(OUTCOMES)))
    def end(self, data: st.DataObject, kind: str) -> None:
        call_id = data.draw(st.sampled_from(self._executing()))
        run_id, node_id = self.running[call_id]
        self.now += 1
        outcome = OUTCOMES[kind]
        if kind == "gone_silent":  # its worker may run it on for a while yet
            outcome = dataclasses.replace(outcome, may_run_until=self.now + 50)
        self.apply(self.machine.ended(call_id, outcome, self.now))
        assert call_id not in self.running, "an ended call gives its place back"
        self.reference[run_id].end(node_id, kind)

    @precondition(lambda self: bool(self._executing()))
    @rule(data=st.data())
    def report(self, data: st.DataObject) -> None:
        call_id = data.draw(st.sampled_from(self._executing()))
        self.apply(self.machine.reported(call_id, {"event": "step", "outputs": {}}))

    def _backing_off(self) -> list[tuple[str, str]]:
        return sorted(
            (run_id, node_id)
            for run_id, run in self.reference.items()
            for node_id, node in run.nodes.items()
            if node.backing_off and node.state is NodeState.PENDING
        )

    @precondition(lambda self: bool(self.retry_at))
    @rule(data=st.data())
    def retry_due(self, data: st.DataObject) -> None:
        """An announced back-off's timer fires: the node's next attempt is queued, unless
        its run was cancelled meanwhile (then nothing at all happens)."""
        run_id, node_id = data.draw(st.sampled_from(sorted(self.retry_at)))
        self.retry_at.discard((run_id, node_id))
        self.now += 5
        effects = self.machine.retry_due(run_id, node_id, self.now)
        if (run_id, node_id) in self._backing_off():
            self.reference[run_id].retry_due(node_id)
        else:
            assert effects == [], "a cancelled run's node never starts again"
        self.apply(effects)

    @invariant()
    def every_back_off_was_announced(self) -> None:
        assert set(self._backing_off()) <= self.retry_at

    @precondition(lambda self: any(not self.machine.is_over(r) for r in self.reference))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        live = sorted(r for r in self.reference if not self.machine.is_over(r))
        run_id = data.draw(st.sampled_from(live))
        self.now += 1
        self.apply(self.machine.cancel(run_id, self.now))
        self.reference[run_id].cancel()

    @precondition(lambda self: bool(self.awaited))
    @rule(data=st.data(), back=st.sampled_from(sorted(COMING_BACK)))
    def a_worker_attaches(self, data: st.DataObject, back: str) -> None:
        """A worker attaches naming some of the awaited calls (its own or not): one of the
        two of name ``box`` that hold them, one of them started again, another token of
        that name, or their token under another name. Only the one that holds a call may
        carry it on; the reference says what becomes of each (:func:`back_with`)."""
        named = data.draw(st.sets(st.sampled_from(sorted(self.awaited))))
        coming = COMING_BACK[back]
        awaited = {c: ("box", held) for c, held in self.awaited.items()}
        verdicts = sort_back(awaited, coming.name, coming, sorted(named), published=False)
        for call_id, held in sorted(self.awaited.items(), key=lambda pair: pair[0]):
            assert held is not None
            expected = back_with(
                (held.token, held.name, held.instance),
                (coming.token, coming.name, coming.instance),
                named,
                call_id,
            )
            verdict = verdicts.get(call_id)
            assert (verdict.name.lower() if verdict else None) == expected, (call_id, back)
            if expected is not None:
                self._back(call_id, expected)

    @precondition(lambda self: bool(self.awaited))
    @rule(data=st.data())
    def the_window_ends(self, data: st.DataObject) -> None:
        """An awaited call's worker did not come back in time."""
        self._back(data.draw(st.sampled_from(sorted(self.awaited))), "gone")

    def _back(self, call_id: str, verdict: str) -> None:
        """An awaited call adopted (it runs on, ended later as any call), or not: its worker
        came back without it (``not_taken``), or did not come back, or was started again."""
        del self.awaited[call_id]
        run_id, node_id = self.running[call_id]
        self.now += 1
        if verdict == "adopt":
            self.apply(self.machine.adopted(call_id, (), self.now))
            return
        not_taken = verdict == "not_taken"
        kind = ErrorKind.NOT_TAKEN if not_taken else ErrorKind.WORKER_GONE
        self.apply(self.machine.not_back(call_id, error_record(kind, verdict), self.now))
        assert call_id not in self.running, "a call given up on gives its place back"
        self.reference[run_id].not_back(node_id, "not_taken" if not_taken else "gone")

    @rule()
    def restart(self) -> None:
        """A new engine: a new machine, an empty queue, and only what was written."""
        self.machine = RunMachine(lambda: next(self.ids), CRASH_LIMIT)
        self.queue.clear()
        self.running.clear()
        self.awaited.clear()
        self.retry_at.clear()  # a back-off is not kept over a restart
        self.progress.clear()  # a running call's reports are kept only once it ends
        unfinished = [
            (dataclasses.replace(row), [dataclasses.replace(n) for n in nodes.values()])
            for row, nodes in self.stored.values()
            if row.state not in TERMINAL_RUN_STATES
        ]
        self.now += 1
        self.apply(self.machine.recover(unfinished, self.now))
        for row, _nodes in unfinished:
            self.reference[row.id].restart()

    # -- what must always hold ---------------------------------------------------------

    def _nodes_now(self, run_id: str) -> tuple[RunRow, dict[str, NodeRow]]:
        live = self.machine.snapshot(run_id)
        if live is None:
            return self.stored[run_id]
        row, nodes = live
        return row, {n.row.node_id: n.row for n in nodes}

    @invariant()
    def both_agree_on_every_state(self) -> None:
        for run_id, reference in self.reference.items():
            row, nodes = self._nodes_now(run_id)
            expected = {node_id: node.state for node_id, node in reference.nodes.items()}
            assert {node_id: n.state for node_id, n in nodes.items()} == expected, run_id
            attempts = {node_id: node.attempt for node_id, node in reference.nodes.items()}
            assert {node_id: n.attempt for node_id, n in nodes.items()} == attempts, run_id
            restores = {node_id: node.restores for node_id, node in reference.nodes.items()}
            assert {i: n.checkpoint is not None for i, n in nodes.items()} == restores, run_id
            assert row.state is reference.state(), run_id
            assert (run_id in self.ended) is (row.state in TERMINAL_RUN_STATES), run_id
            assert self.queued_times.get(run_id, 0) == reference.queued_times, run_id

    @invariant()
    def what_was_written_is_what_the_machine_holds(self) -> None:
        for run_id in self.reference:
            row, nodes = self._nodes_now(run_id)
            stored_row, stored_nodes = self.stored[run_id]
            assert stored_row.state is row.state, run_id
            for node_id, node in nodes.items():
                stored = stored_nodes[node_id]
                assert (stored.state, stored.call_id) == (node.state, node.call_id), node_id

    @invariant()
    def a_terminal_state_is_final(self) -> None:
        for run_id, reference in self.reference.items():
            for node_id, node in reference.nodes.items():
                if node.state in TERMINAL_NODE_STATES:
                    first = self.terminal.setdefault((run_id, node_id), node.state)
                    assert node.state is first, (run_id, node_id)

    @invariant()
    def the_queue_holds_exactly_the_queued_nodes(self) -> None:
        queued = set()
        for run_id in self.reference:
            _row, nodes = self._nodes_now(run_id)
            queued |= {n.call_id for n in nodes.values() if n.state is NodeState.QUEUED}
        assert set(self.queue) == queued


TestRunMachineAgreesWithItsReference = against_reference(RunMachineComparison)
