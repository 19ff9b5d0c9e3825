"""Runs flows: ready nodes become calls for the dispatcher, placed calls run, results flow on.

The states of nodes and runs are in :mod:`fluksio.api.runs.states`. Every transition is
written to SQLite as it happens, so an engine that restarts finds each run where it was:
queued work is queued again in its original order; a call that was executing is failed
with ``EngineRestarted``, or queued again when its node is marked ``retry_on_restart``.

The run manager owns the runs, not the scheduling: it hands the dispatcher
(:class:`Dispatch`, the loop's one owner) the events of its calls, and the dispatcher hands
it each placement to :meth:`RunManager.launch`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from fluksio.agent.launcher import CallOutcome, CallSpec, error_record
from fluksio.agent.runner import THREAD_VARIABLES
from fluksio.api.errors import Conflict, NotFound, StorageFull
from fluksio.api.logging import get_logger
from fluksio.api.runs.models import FlowSpec, NodeSpec
from fluksio.api.runs.provenance import Provenance
from fluksio.api.runs.redact import redact, secret_values
from fluksio.api.runs.signature import select_kwargs
from fluksio.api.runs.states import (
    TERMINAL_NODE_STATES,
    TERMINAL_RUN_STATES,
    NodeState,
    RunState,
)
from fluksio.api.runs.store import FlowStore, NodeRow, RunRow, RunStore
from fluksio.api.secrets import SecretDenied, SecretStore, resolve_params
from fluksio.scheduler import (
    ENGINE_ID,
    CallRequest,
    Placement,
    PlaceView,
    Policy,
    WaitReason,
)

__all__ = [
    "Dispatch",
    "Executor",
    "NodeView",
    "RunChange",
    "RunManager",
    "RunView",
    "WaitingCall",
]

log = get_logger(__name__)
EVENTS_KEPT = 100
FLUSH_RETRY_S = 1.0
"""While the disk is full, how often the runs' changes kept in memory are tried again."""


class RunChange(NamedTuple):
    """What one write recorded of a run: its row, the nodes that changed, and whether the
    run itself is new or changed state."""

    row: RunRow
    nodes: Sequence[NodeRow]
    run_changed: bool


class Dispatch(Protocol):
    """The dispatcher, as the run manager hands it events and asks it questions."""

    def submit(self, request: CallRequest) -> None: ...

    def withdraw(self, call_id: str) -> bool: ...

    def finished(self, call_id: str) -> None: ...

    def cancel_running(self, call_id: str) -> bool: ...

    def kick(self) -> None: ...

    def run_pass(self) -> None: ...

    def reason(self, call_id: str) -> WaitReason | None: ...

    def waiting(self) -> list[str]: ...

    def place(self, place_id: str) -> PlaceView | None: ...


class Executor(Protocol):
    """Where calls placed on one place run: the engine's launcher, or a worker's socket."""

    @property
    def labels(self) -> frozenset[str]:
        """The labels signed for this place (empty for the engine): which secrets it gets."""
        ...

    def call_env(self) -> dict[str, str]:
        """Variables every call on this place needs (where its artifacts go), per call."""
        ...

    def provenance(self) -> Provenance:
        """Where calls placed here run (the GPUs are the placement's to add)."""
        ...

    async def run(
        self, spec: CallSpec, on_event: Callable[[dict[str, Any]], None]
    ) -> CallOutcome: ...

    def cancel(self, call_id: str) -> bool: ...


@dataclass(frozen=True)
class NodeView:
    """One node of a run as a client sees it; ``reason`` only while it is queued."""

    row: NodeRow
    reason: str | None
    event_count: int


@dataclass(frozen=True)
class RunView:
    row: RunRow
    nodes: tuple[NodeView, ...]


@dataclass(frozen=True)
class WaitingCall:
    """A queued node call, with why it waits."""

    call_id: str
    run_id: str
    flow: str
    node: str
    worker: str | None
    queued_at: float | None
    reason: WaitReason | None


@dataclass
class _Node:
    spec: NodeSpec
    row: NodeRow
    dependents: list[str] = field(default_factory=list)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=EVENTS_KEPT)
    )
    event_count: int = 0
    secrets: tuple[str, ...] = ()
    """Secret values released to the running call: blanked in what it reports."""
    retried: int = 0
    """How often it was queued again after losing its worker (``retries``)."""


@dataclass
class _Run:
    row: RunRow
    nodes: dict[str, _Node]
    cancelling: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    dirty: dict[str, NodeRow] = field(default_factory=dict)
    """Nodes changed since the last write; written together once per loop iteration."""
    state_changed: bool = False
    """Its own state changed since the last write; written with its nodes."""
    announced: bool = False
    """Its first write was seen by the observers (a new run counts as a change)."""
    unfinished: int = 0
    """How many nodes are not yet in a terminal state (kept by :meth:`RunManager._ended`)."""


class RunManager:
    def __init__(
        self, *, runs: RunStore, flows: FlowStore, secrets: SecretStore, dispatch: Dispatch
    ) -> None:
        self._runs_store = runs
        self._flows = flows
        self._secrets = secrets
        self._dispatch = dispatch
        self._runs: dict[str, _Run] = {}
        self._calls: dict[str, tuple[_Run, _Node]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._flush_pending = False
        self._dirty_runs: dict[str, _Run] = {}
        self._store_full = False
        """The last write found the disk full: changes wait in memory, retried each second."""
        self._flush_retry: asyncio.TimerHandle | None = None
        self._closing = False
        self.observers: list[Callable[[Sequence[RunChange]], None]] = []
        """Told of every write, as it happens: the live feed and the metrics."""
        self.progress_observers: list[Callable[[RunRow, NodeRow, int], None]] = []
        """Told of each event a running call reports (its run, its node, how many so far)."""

    # -- starting, cancelling, recovering ------------------------------------------------

    def start_run(self, flow_name: str, params: dict[str, Any]) -> RunView:
        record = self._flows.get(flow_name)
        if record is None:
            raise NotFound(f"no flow named {flow_name!r}")
        flow = FlowSpec.model_validate(record.spec)
        row = RunRow(
            id=secrets.token_hex(8),
            flow=flow_name,
            spec=record.spec,
            params=params,
            state=RunState.QUEUED,
            created_at=time.time(),
        )
        run = self._build(row, flow, [NodeRow(node.id, NodeState.PENDING) for node in flow.nodes])
        self._runs_store.create(row, [node.row for node in run.nodes.values()])
        self._runs[row.id] = run
        changed = [self._queue(run, node) for node in run.nodes.values() if not node.spec.after]
        self._save(run, changed)
        if self.observers:
            # Told as it is now, queued: the pass below may start it before the write.
            self._tell([RunChange(row, [node.row for node in changed], True)])
            run.announced = True
        log.info("run.started", run_id=row.id, flow=flow_name, nodes=len(run.nodes))
        # Now, so that the answer already says where it runs or why it waits.
        self._dispatch.run_pass()
        return self._view_active(run)

    def cancel(self, run_id: str) -> RunView:
        run = self._runs.get(run_id)
        if run is None:
            found = self._runs_store.get(run_id)
            if found is None:
                raise NotFound(f"no run with id {run_id!r}")
            raise Conflict(f"run {run_id} has already ended ({found[0].state})")
        run.cancelling = True
        changed = []
        for node in run.nodes.values():
            state = node.row.state
            if state is NodeState.PENDING or (
                state is NodeState.QUEUED and self._dispatch.withdraw(str(node.row.call_id))
            ):
                self._ended(
                    run,
                    node,
                    NodeState.CANCELLED,
                    error_record("NodeCancelled", "the run was cancelled"),
                )
                changed.append(node)
            elif state is NodeState.RUNNING:
                self._dispatch.cancel_running(str(node.row.call_id))
        self._save(run, changed)
        log.info("run.cancelling", run_id=run_id)
        self._complete_if_done(run)
        self._dispatch.kick()
        return self._view_active(run)

    def recover(self) -> int:
        """Resume the runs a previous engine left unfinished; returns how many."""
        recovered = 0
        for row, node_rows in self._runs_store.unfinished():
            flow = FlowSpec.model_validate(row.spec)
            run = self._build(row, flow, node_rows)
            self._runs[row.id] = run
            changed = []
            for node in run.nodes.values():
                if node.row.state is NodeState.RUNNING:
                    if node.spec.retry_on_restart:
                        node.row.state = NodeState.PENDING
                    else:
                        self._ended(
                            run,
                            node,
                            NodeState.FAILED,
                            error_record(
                                "EngineRestarted",
                                "the engine restarted while this node was executing",
                            ),
                        )
                    changed.append(node)
                elif node.row.state is NodeState.QUEUED:
                    # Queued again below, at its old place in line.
                    node.row.state = NodeState.PENDING
            for node in run.nodes.values():
                if node.row.state in TERMINAL_NODE_STATES - {NodeState.SUCCEEDED}:
                    changed += self._skip_dependents(run, node)
            for node in run.nodes.values():
                if node.row.state is NodeState.PENDING and self._ready(run, node):
                    changed.append(self._queue(run, node, queued_at=node.row.queued_at))
            self._save(run, changed)
            self._complete_if_done(run)
            recovered += 1
        if recovered:
            log.info("runs.recovered", count=recovered)
        self._dispatch.kick()
        return recovered

    async def close(self) -> None:
        """Stop what executes, recording nothing of how it ended.

        A graceful stop leaves the state exactly as a crash would, so that the next
        engine's :meth:`recover` treats both alike (``EngineRestarted``, or a retry).
        """
        self._closing = True
        for _run, node in list(self._calls.values()):
            if node.row.state is NodeState.RUNNING:
                self._dispatch.cancel_running(str(node.row.call_id))
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=10)
        self._flush()

    # -- the machinery -------------------------------------------------------------------

    def _build(self, row: RunRow, flow: FlowSpec, node_rows: list[NodeRow]) -> _Run:
        by_id = {node_row.node_id: node_row for node_row in node_rows}
        nodes = {spec.id: _Node(spec, by_id[spec.id]) for spec in flow.nodes}
        for node in nodes.values():
            for dependency in node.spec.after:
                nodes[dependency].dependents.append(node.spec.id)
            node.events.extend(node.row.events or [])
        run = _Run(row=row, nodes=nodes)
        run.unfinished = sum(1 for n in nodes.values() if n.row.state not in TERMINAL_NODE_STATES)
        return run

    @staticmethod
    def _ended(
        run: _Run, node: _Node, state: NodeState, error: dict[str, str] | None = None
    ) -> None:
        """Move a node to a terminal state, keeping the run's count of unfinished nodes."""
        if node.row.state not in TERMINAL_NODE_STATES:
            run.unfinished -= 1
        node.row.state = state
        node.row.ended_at = time.time()
        if error is not None:
            node.row.error = error

    def _queue(self, run: _Run, node: _Node, queued_at: float | None = None) -> _Node:
        call_id = secrets.token_hex(8)
        node.row.state = NodeState.QUEUED
        node.row.call_id = call_id
        node.row.queued_at = queued_at or time.time()
        self._calls[call_id] = (run, node)
        resources = node.spec.resources
        self._dispatch.submit(
            CallRequest(
                id=call_id,
                queued_at=node.row.queued_at,
                label=node.spec.worker,
                policy=Policy(node.spec.worker_policy),
                cpus=resources.cpus,
                gpus=resources.gpus,
                ram_mb=resources.ram_mb,
                limit=node.spec.limit,
            )
        )
        return node

    def launch(self, placement: Placement, executor: Executor) -> None:
        """The dispatcher placed a call on ``executor``: start it there."""
        run, node = self._calls[placement.request_id]
        node.row.place = self._place_name(placement.worker_id)
        node.row.provenance = dataclasses.replace(
            executor.provenance(), gpu_ids=tuple(placement.gpu_ids)
        )
        node.row.started_at = time.time()
        try:
            kwargs = self._kwargs(run, node, placement.worker_id, executor.labels)
        except SecretDenied as denied:
            self._dispatch.finished(placement.request_id)
            self._end_node(
                run, node, CallOutcome(False, error=error_record("SecretDenied", denied.detail))
            )
            return
        node.row.state = NodeState.RUNNING
        if run.row.state is RunState.QUEUED:
            run.row.state = RunState.RUNNING
            run.row.started_at = node.row.started_at
            run.state_changed = True
        self._save(run, [node])
        spec = CallSpec(
            call_id=placement.request_id,
            source=node.spec.code,
            node=node.spec.id,
            flow=run.row.flow,
            kwargs=kwargs,
            env={**self._call_env(placement), **executor.call_env()},
            timeout=node.spec.timeout,
            limit=node.spec.limit or 0.0,
            run_id=run.row.id,
        )
        task = asyncio.get_running_loop().create_task(self._execute(run, node, executor, spec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _kwargs(
        self, run: _Run, node: _Node, place_id: str, labels: frozenset[str]
    ) -> dict[str, Any]:
        available: dict[str, Any] = dict(run.row.params)
        resolved = resolve_params(
            node.spec.params,
            self._secrets,
            on_engine=place_id == ENGINE_ID,
            worker_labels=labels,
        )
        node.secrets = secret_values(node.spec.params, resolved)
        available.update(resolved)
        for dependency in node.spec.after:
            available[dependency] = run.nodes[dependency].row.result
        return select_kwargs(node.spec.code, available)

    def _call_env(self, placement: Placement) -> dict[str, str]:
        env: dict[str, str] = {}
        if placement.threads is not None:
            env.update(dict.fromkeys(THREAD_VARIABLES, str(placement.threads)))
        if placement.gpu_ids or placement.gpus == 0:
            # A call that asked for no GPUs sees none: it cannot take another call's card.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in placement.gpu_ids)
        return env

    async def _execute(self, run: _Run, node: _Node, executor: Executor, spec: CallSpec) -> None:
        def on_event(record: dict[str, Any]) -> None:
            record.pop("kind", None)
            node.events.append(redact(record, node.secrets))
            node.event_count += 1
            for observer in self.progress_observers:
                observer(run.row, node.row, node.event_count)

        try:
            outcome = await executor.run(spec, on_event)
        except Exception as exc:
            log.exception("call.crashed", call_id=spec.call_id)
            outcome = CallOutcome(False, error=error_record("EngineError", str(exc)))
        if self._closing:
            return  # stopped by the engine's shutdown: recovery decides, not this outcome
        self._dispatch.finished(spec.call_id)
        self._end_node(run, node, outcome)

    def _end_node(self, run: _Run, node: _Node, outcome: CallOutcome) -> None:
        self._calls.pop(str(node.row.call_id), None)
        if self._retry(run, node, outcome):
            return
        row = node.row
        row.logs = redact(outcome.logs, node.secrets)
        row.events = list(node.events)
        if outcome.ok:
            row.result = redact(outcome.result, node.secrets)
            self._ended(run, node, NodeState.SUCCEEDED)
        else:
            cancelled = run.cancelling and (outcome.error or {}).get("type") == "NodeCancelled"
            state = NodeState.CANCELLED if cancelled else NodeState.FAILED
            self._ended(run, node, state, redact(outcome.error, node.secrets))
        node.secrets = ()
        changed = [node]
        if row.state is NodeState.SUCCEEDED:
            for dependent_id in node.dependents:
                dependent = run.nodes[dependent_id]
                if (
                    dependent.row.state is NodeState.PENDING
                    and self._ready(run, dependent)
                    and not run.cancelling
                ):
                    changed.append(self._queue(run, dependent))
        else:
            changed += self._skip_dependents(run, node)
        self._save(run, changed)
        self._complete_if_done(run)
        self._dispatch.kick()

    def _retry(self, run: _Run, node: _Node, outcome: CallOutcome) -> bool:
        """Queue the node again when its worker never took it, or was lost and it allows a
        retry.

        The lost call's late answer, if its worker ever sends one, is ignored: the node
        keeps exactly one result, the first its run receives.
        """
        error = outcome.error or {}
        if outcome.ok or run.cancelling:
            return False
        # A call its worker never took (it froze first) never ran: it simply goes back in
        # line, whatever its retries. A lost call may have run: only with retries left.
        never_ran = error.get("type") == "NotTaken"
        if not never_ran and (
            error.get("type") != "WorkerGone" or node.retried >= node.spec.retries
        ):
            return False
        if not never_ran:
            node.retried += 1
        node.secrets = ()
        log.info(
            "call.requeued" if never_ran else "call.retried",
            run_id=run.row.id,
            node=node.spec.id,
            attempt=node.retried + 1,
            reason=error.get("message"),
        )
        event = "requeued" if never_ran else "retried"
        node.events.append(
            {"event": event, "outputs": {"after": error.get("message")}, "ts": time.time()}
        )
        node.event_count += 1
        self._save(run, [self._queue(run, node, queued_at=node.row.queued_at)])  # its place in line
        self._dispatch.kick()
        return True

    def _ready(self, run: _Run, node: _Node) -> bool:
        return all(run.nodes[d].row.state is NodeState.SUCCEEDED for d in node.spec.after)

    def _skip_dependents(self, run: _Run, node: _Node) -> list[_Node]:
        skipped = []
        for dependent_id in node.dependents:
            dependent = run.nodes[dependent_id]
            if dependent.row.state is not NodeState.PENDING:
                continue
            self._ended(
                run,
                dependent,
                NodeState.SKIPPED,
                error_record("Skipped", f"dependency {node.spec.id!r} {node.row.state}"),
            )
            skipped.append(dependent)
            skipped += self._skip_dependents(run, dependent)
        return skipped

    def _complete_if_done(self, run: _Run) -> None:
        if run.row.state in TERMINAL_RUN_STATES or run.unfinished:
            return
        states = {node.row.state for node in run.nodes.values()}
        if run.cancelling or NodeState.CANCELLED in states:
            final = RunState.CANCELLED
        elif states & {NodeState.FAILED, NodeState.SKIPPED}:
            final = RunState.FAILED
        else:
            final = RunState.SUCCEEDED
        run.row.state = final
        run.row.ended_at = time.time()
        run.state_changed = True
        self._dirty_runs[run.row.id] = run
        self._flush()  # now: a waiter reads the ended run from the store (or, while the
        # disk is full, from memory: it stays an active run until it is written)
        run.done.set()
        log.info("run.ended", run_id=run.row.id, state=final)

    def _save(self, run: _Run, nodes: list[_Node]) -> None:
        """Mark nodes changed; they are written in one transaction with the moment's others.

        The write happens before the event loop waits for anything again, so what a client
        reads through the API and what a restarted engine finds never lag behind.
        """
        for node in nodes:
            run.dirty[node.spec.id] = node.row
        self._dirty_runs[run.row.id] = run
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        runs, self._dirty_runs = self._dirty_runs, {}
        try:
            self._runs_store.save_many(
                [(run.row.id, list(run.dirty.values())) for run in runs.values()],
                [run.row for run in runs.values() if run.state_changed],
            )
        except StorageFull as full:
            # Nothing was written. The runs go on in memory (what the API shows), and
            # their changes are written together once the disk has room again.
            self._dirty_runs = {**runs, **self._dirty_runs}
            if not self._store_full:
                log.error("store.full", error=full.detail, runs=len(runs))
            self._store_full = True
            if not self._closing:
                # One retry at a time, however many runs end (and flush) meanwhile.
                self._flush_pending = True
                if self._flush_retry is None:
                    loop = asyncio.get_running_loop()
                    self._flush_retry = loop.call_later(FLUSH_RETRY_S, self._retry_flush)
            return
        if self._store_full:
            self._store_full = False
            log.info("store.writable", runs=len(runs))
        if self.observers:
            self._tell(
                [
                    RunChange(
                        run.row, list(run.dirty.values()), run.state_changed or not run.announced
                    )
                    for run in runs.values()
                ]
            )
        for run in runs.values():
            run.dirty.clear()
            run.state_changed = False
            run.announced = True
            if run.row.state in TERMINAL_RUN_STATES:
                self._runs.pop(run.row.id, None)  # ended, and now in the store

    def _retry_flush(self) -> None:
        self._flush_retry = None
        self._flush()

    def _tell(self, changes: list[RunChange]) -> None:
        for observer in self.observers:
            observer(changes)

    # -- describing -------------------------------------------------------------------

    def view(self, run_id: str) -> RunView | None:
        run = self._runs.get(run_id)
        if run is not None:
            return self._view_active(run)
        found = self._runs_store.get(run_id)
        if found is None:
            return None
        row, nodes = found
        return RunView(row, tuple(NodeView(n, None, len(n.events or [])) for n in nodes))

    async def wait(self, run_id: str, timeout: float) -> RunView | None:
        """The run once it has ended, or as it is after ``timeout`` seconds."""
        run = self._runs.get(run_id)
        if run is not None and timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.done.wait(), timeout)
        return self.view(run_id)

    def waiting_calls(self) -> list[WaitingCall]:
        """Every waiting node call, in the order it will be served, with its reason."""
        found = []
        for call_id in self._dispatch.waiting():
            entry = self._calls.get(call_id)
            if entry is None:
                continue
            run, node = entry
            found.append(
                WaitingCall(
                    call_id=call_id,
                    run_id=run.row.id,
                    flow=run.row.flow,
                    node=node.spec.id,
                    worker=node.spec.worker,
                    queued_at=node.row.queued_at,
                    reason=self._dispatch.reason(call_id),
                )
            )
        return found

    def waiting_labels(self) -> collections.Counter[str]:
        """How many calls wait, by the label each wants (``""``: any place will do)."""
        wanted: collections.Counter[str] = collections.Counter()
        for call_id in self._dispatch.waiting():
            entry = self._calls.get(call_id)
            if entry is not None:
                wanted[entry[1].spec.worker or ""] += 1
        return wanted

    def _view_active(self, run: _Run) -> RunView:
        nodes = []
        for node in run.nodes.values():
            reason = None
            if node.row.state is NodeState.QUEUED:
                found = self._dispatch.reason(str(node.row.call_id))
                reason = found.text if found is not None else None
            node.row.events = list(node.events)
            nodes.append(NodeView(node.row, reason, node.event_count))
        return RunView(run.row, tuple(nodes))

    def _place_name(self, place_id: str) -> str:
        if place_id == ENGINE_ID:
            return "engine"
        view = self._dispatch.place(place_id)
        return view.name if view is not None else place_id
