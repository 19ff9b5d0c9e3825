"""Runs flows: ready nodes become scheduler requests, placements become calls, results flow on.

Life of a node in a run: ``pending`` (waiting for its dependencies) -> ``queued`` (a
request in the scheduler; it says why it waits) -> ``running`` (a call on an executor)
-> ``succeeded`` | ``failed`` | ``cancelled``; or ``skipped`` when a dependency did not
succeed. A run is ``queued`` until its first node starts, then ``running``, then
``succeeded``, ``failed`` (some node failed or was skipped) or ``cancelled``.

Every transition is written to SQLite as it happens, so an engine that restarts finds
each run where it was: queued work is queued again in its original order; a call that was
executing is failed with ``EngineRestarted``, or queued again when its node is marked
``retry_on_restart``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import secrets as random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fluksio.agent.launcher import CallOutcome, CallSpec, error_record
from fluksio.agent.runner import THREAD_VARIABLES
from fluksio.api.errors import Conflict, NotFound
from fluksio.api.logging import get_logger
from fluksio.api.runs.models import FlowSpec, NodeSpec
from fluksio.api.runs.signature import select_kwargs
from fluksio.api.runs.store import FlowStore, NodeRow, RunRow, RunStore
from fluksio.api.secrets import SecretDenied, SecretStore, resolve_params
from fluksio.api.timefmt import iso8601
from fluksio.scheduler import (
    ENGINE_ID,
    Placement,
    Policy,
    Request,
    Scheduler,
    WaitReason,
    Worker,
)

__all__ = ["Executor", "RunManager"]

log = get_logger(__name__)
EVENTS_KEPT = 100
TERMINAL_NODE_STATES = frozenset({"succeeded", "failed", "cancelled", "skipped"})


class Provisioning(Protocol):
    """The provisioning driver, as the run manager uses it."""

    def want(self, provisioner: str, profile: str) -> None: ...

    def describe(self, key: str) -> str | None: ...


class Executor(Protocol):
    """Where calls placed on one place run: the engine's launcher, or a worker's socket."""

    @property
    def labels(self) -> frozenset[str]:
        """The labels signed for this place (empty for the engine): which secrets it gets."""
        ...

    def call_env(self) -> dict[str, str]:
        """Variables every call on this place needs (where its artifacts go), per call."""
        ...

    async def run(
        self, spec: CallSpec, on_event: Callable[[dict[str, Any]], None]
    ) -> CallOutcome: ...

    def cancel(self, call_id: str) -> bool: ...


@dataclass
class _Node:
    spec: NodeSpec
    row: NodeRow
    dependents: list[str] = field(default_factory=list)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=EVENTS_KEPT)
    )
    event_count: int = 0


@dataclass
class _Run:
    row: RunRow
    nodes: dict[str, _Node]
    cancelling: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)
    dirty: dict[str, NodeRow] = field(default_factory=dict)
    unfinished: int = 0
    """How many nodes are not yet in a terminal state (kept by :meth:`RunManager._ended`)."""
    """Nodes changed since the last write; written together once per loop iteration."""


class RunManager:
    def __init__(
        self,
        *,
        runs: RunStore,
        flows: FlowStore,
        secrets: SecretStore,
        scheduler: Scheduler,
        executors: dict[str, Executor],
    ) -> None:
        self._runs_store = runs
        self._flows = flows
        self._secrets = secrets
        self.scheduler = scheduler
        self.executors = executors
        self._runs: dict[str, _Run] = {}
        self._calls: dict[str, tuple[_Run, _Node]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pass_pending = False
        self._flush_pending = False
        self._dirty_runs: dict[str, _Run] = {}
        self._closing = False
        self.provisioning: Provisioning | None = None
        """Where the plan's asks for machines go, and how each profile's request stands."""

    # -- starting, cancelling, recovering ------------------------------------------------

    def start_run(self, flow_name: str, params: dict[str, Any]) -> dict[str, Any]:
        record = self._flows.get(flow_name)
        if record is None:
            raise NotFound(f"no flow named {flow_name!r}")
        flow = FlowSpec.model_validate(record.spec)
        row = RunRow(
            id=random.token_hex(8),
            flow=flow_name,
            spec=record.spec,
            params=params,
            state="queued",
            created_at=time.time(),
        )
        run = self._build(row, flow, [NodeRow(node.id, "pending") for node in flow.nodes])
        self._runs_store.create(row, [node.row for node in run.nodes.values()])
        self._runs[row.id] = run
        changed = [self._queue(run, node) for node in run.nodes.values() if not node.spec.after]
        self._save(run, changed)
        log.info("run.started", run_id=row.id, flow=flow_name, nodes=len(run.nodes))
        self._pass()  # now, so that the answer already says where it runs or why it waits
        return self._describe_active(run)

    def cancel(self, run_id: str) -> dict[str, Any]:
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
            if state == "pending" or (
                state == "queued" and self.scheduler.withdraw(str(node.row.call_id))
            ):
                self._ended(
                    run, node, "cancelled", error_record("NodeCancelled", "the run was cancelled")
                )
                changed.append(node)
            elif state == "running":
                executor = self.executors.get(self._placed_on(node))
                if executor is not None:
                    executor.cancel(str(node.row.call_id))
        self._save(run, changed)
        log.info("run.cancelling", run_id=run_id)
        self._complete_if_done(run)
        self._kick()
        return self._describe_active(run)

    def recover(self) -> int:
        """Resume the runs a previous engine left unfinished; returns how many."""
        recovered = 0
        for row, node_rows in self._runs_store.unfinished():
            flow = FlowSpec.model_validate(row.spec)
            run = self._build(row, flow, node_rows)
            self._runs[row.id] = run
            changed = []
            for node in run.nodes.values():
                if node.row.state == "running":
                    if node.spec.retry_on_restart:
                        node.row.state = "pending"
                    else:
                        self._ended(
                            run,
                            node,
                            "failed",
                            error_record(
                                "EngineRestarted",
                                "the engine restarted while this node was executing",
                            ),
                        )
                    changed.append(node)
                elif node.row.state == "queued":
                    node.row.state = "pending"  # queued again below, at its old place in line
            for node in run.nodes.values():
                if node.row.state in {"failed", "cancelled", "skipped"}:
                    changed += self._skip_dependents(run, node)
            for node in run.nodes.values():
                if node.row.state == "pending" and self._ready(run, node):
                    changed.append(self._queue(run, node, queued_at=node.row.queued_at))
            self._save(run, changed)
            self._complete_if_done(run)
            recovered += 1
        if recovered:
            log.info("runs.recovered", count=recovered)
        self._kick()
        return recovered

    async def close(self) -> None:
        """Stop what executes, recording nothing of how it ended.

        A graceful stop leaves the state exactly as a crash would, so that the next
        engine's :meth:`recover` treats both alike (``EngineRestarted``, or a retry).
        """
        self._closing = True
        for _run, node in list(self._calls.values()):
            if node.row.state == "running":
                executor = self.executors.get(self._placed_on(node))
                if executor is not None:
                    executor.cancel(str(node.row.call_id))
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
    def _ended(run: _Run, node: _Node, state: str, error: dict[str, str] | None = None) -> None:
        """Move a node to a terminal state, keeping the run's count of unfinished nodes."""
        if node.row.state not in TERMINAL_NODE_STATES:
            run.unfinished -= 1
        node.row.state = state
        node.row.ended_at = time.time()
        if error is not None:
            node.row.error = error

    def _queue(self, run: _Run, node: _Node, queued_at: float | None = None) -> _Node:
        call_id = random.token_hex(8)
        node.row.state = "queued"
        node.row.call_id = call_id
        node.row.queued_at = queued_at or time.time()
        self._calls[call_id] = (run, node)
        resources = node.spec.resources
        self.scheduler.submit(
            Request(
                id=call_id,
                queued_at=node.row.queued_at,
                label=node.spec.worker,
                policy=Policy(node.spec.worker_policy),
                cpus=resources.cpus,
                gpus=resources.gpus,
                ram_mb=resources.ram_mb,
            )
        )
        return node

    def _kick(self) -> None:
        """Run a scheduling pass soon: once for all the events of this moment."""
        if not self._pass_pending:
            self._pass_pending = True
            asyncio.get_running_loop().call_soon(self._pass)

    def _pass(self) -> None:
        self._pass_pending = False
        plan = self.scheduler.schedule()
        for placement in plan.placements:
            self._launch(placement)
        for ask in plan.asks:
            log.info(
                "provision.wanted",
                provisioner=ask.provisioner,
                profile=ask.profile,
                call_id=ask.request_id,
            )
            if self.provisioning is not None:
                self.provisioning.want(ask.provisioner, ask.profile)

    def replan(self) -> None:
        """Something outside the runs changed (a profile's request): plan again soon."""
        self._kick()

    def _reason(self, call_id: str) -> WaitReason | None:
        """The scheduler's reason, with how the provisioning it waits for stands."""
        reason = self.scheduler.reason(call_id)
        if reason is None or reason.provisioning is None or self.provisioning is None:
            return reason
        status = self.provisioning.describe(reason.provisioning)
        if status is None:
            return reason
        return replace(reason, text=f"provisioning {reason.provisioning}, {status}")

    def _place_name(self, place_id: str) -> str:
        return "engine" if place_id == ENGINE_ID else self.scheduler.place(place_id).worker.name

    def _placed_on(self, node: _Node) -> str:
        allocation = self.scheduler.allocation(str(node.row.call_id))
        return allocation.place_id if allocation is not None else ENGINE_ID

    # -- places coming and going -------------------------------------------------------

    def attach(self, worker: Worker, executor: Executor) -> None:
        """A worker attached: it can take calls from the next pass on."""
        self.executors[worker.id] = executor
        self.scheduler.add_worker(worker)
        self._kick()

    def detach(self, worker_id: str) -> None:
        """A worker is gone; its calls in flight were failed by its executor."""
        self.executors.pop(worker_id, None)
        if self.scheduler.has_place(worker_id):
            self.scheduler.remove_worker(worker_id)
        self._kick()

    def _launch(self, placement: Placement) -> None:
        run, node = self._calls[placement.request_id]
        executor = self.executors[placement.worker_id]
        node.row.place = self._place_name(placement.worker_id)
        node.row.started_at = time.time()
        try:
            kwargs = self._kwargs(run, node, placement.worker_id, executor.labels)
        except SecretDenied as denied:
            self.scheduler.finish(placement.request_id)
            self._end_node(
                run, node, CallOutcome(False, error=error_record("SecretDenied", denied.detail))
            )
            return
        node.row.state = "running"
        if run.row.state == "queued":
            run.row.state = "running"
            run.row.started_at = node.row.started_at
            self._runs_store.set_run_state(run.row.id, "running", started_at=run.row.started_at)
        self._save(run, [node])
        spec = CallSpec(
            call_id=placement.request_id,
            source=node.spec.code,
            node=node.spec.id,
            flow=run.row.flow,
            kwargs=kwargs,
            env={**self._call_env(placement), **executor.call_env()},
            timeout=node.spec.timeout,
            run_id=run.row.id,
        )
        task = asyncio.get_running_loop().create_task(self._execute(run, node, executor, spec))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _kwargs(
        self, run: _Run, node: _Node, place_id: str, labels: frozenset[str]
    ) -> dict[str, Any]:
        available: dict[str, Any] = dict(run.row.params)
        available.update(
            resolve_params(
                node.spec.params,
                self._secrets,
                on_engine=place_id == ENGINE_ID,
                worker_labels=labels,
            )
        )
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
            node.events.append(record)
            node.event_count += 1

        try:
            outcome = await executor.run(spec, on_event)
        except Exception as exc:
            log.exception("call.crashed", call_id=spec.call_id)
            outcome = CallOutcome(False, error=error_record("EngineError", str(exc)))
        if self._closing:
            return  # stopped by the engine's shutdown: recovery decides, not this outcome
        if self.scheduler.allocation(spec.call_id) is not None:
            self.scheduler.finish(spec.call_id)  # not when its worker was removed meanwhile
        self._end_node(run, node, outcome)

    def _end_node(self, run: _Run, node: _Node, outcome: CallOutcome) -> None:
        self._calls.pop(str(node.row.call_id), None)
        row = node.row
        row.logs = outcome.logs
        row.events = list(node.events)
        if outcome.ok:
            row.result = outcome.result
            self._ended(run, node, "succeeded")
        else:
            cancelled = run.cancelling and (outcome.error or {}).get("type") == "NodeCancelled"
            self._ended(run, node, "cancelled" if cancelled else "failed", outcome.error)
        changed = [node]
        if row.state == "succeeded":
            for dependent_id in node.dependents:
                dependent = run.nodes[dependent_id]
                if (
                    dependent.row.state == "pending"
                    and self._ready(run, dependent)
                    and not run.cancelling
                ):
                    changed.append(self._queue(run, dependent))
        else:
            changed += self._skip_dependents(run, node)
        self._save(run, changed)
        self._complete_if_done(run)
        self._kick()

    def _ready(self, run: _Run, node: _Node) -> bool:
        return all(run.nodes[d].row.state == "succeeded" for d in node.spec.after)

    def _skip_dependents(self, run: _Run, node: _Node) -> list[_Node]:
        skipped = []
        for dependent_id in node.dependents:
            dependent = run.nodes[dependent_id]
            if dependent.row.state != "pending":
                continue
            self._ended(
                run,
                dependent,
                "skipped",
                error_record("Skipped", f"dependency {node.spec.id!r} {node.row.state}"),
            )
            skipped.append(dependent)
            skipped += self._skip_dependents(run, dependent)
        return skipped

    def _complete_if_done(self, run: _Run) -> None:
        if run.row.state in {"succeeded", "failed", "cancelled"} or run.unfinished:
            return
        states = {node.row.state for node in run.nodes.values()}
        if run.cancelling or "cancelled" in states:
            final = "cancelled"
        elif states & {"failed", "skipped"}:
            final = "failed"
        else:
            final = "succeeded"
        run.row.state = final
        run.row.ended_at = time.time()
        self._flush()  # the nodes' final states before the run's
        self._runs_store.set_run_state(run.row.id, final, ended_at=run.row.ended_at)
        self._runs.pop(run.row.id, None)
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
        self._runs_store.save_many(
            [(run.row.id, list(run.dirty.values())) for run in runs.values()]
        )
        for run in runs.values():
            run.dirty.clear()

    # -- describing ----------------------------------------------------------------------

    def describe(self, run_id: str) -> dict[str, Any] | None:
        run = self._runs.get(run_id)
        if run is not None:
            return self._describe_active(run)
        found = self._runs_store.get(run_id)
        if found is None:
            return None
        row, nodes = found
        return describe_run(row, [(node, None, None) for node in nodes])

    async def wait(self, run_id: str, timeout: float) -> dict[str, Any] | None:
        """The run once it has ended, or as it is after ``timeout`` seconds."""
        run = self._runs.get(run_id)
        if run is not None and timeout > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.done.wait(), timeout)
        return self.describe(run_id)

    def queued_view(self) -> list[dict[str, Any]]:
        """Every waiting node call, in the order it will be served, with its reason."""
        views = []
        for call_id in self.scheduler.waiting():
            found = self._calls.get(call_id)
            if found is None:
                continue
            run, node = found
            reason = self._reason(call_id)
            views.append(
                {
                    "call_id": call_id,
                    "run_id": run.row.id,
                    "flow": run.row.flow,
                    "node": node.spec.id,
                    "worker": node.spec.worker,
                    "queued_at": iso8601(node.row.queued_at),
                    "reason": reason.text if reason is not None else None,
                    "kind": reason.kind.value if reason is not None else None,
                }
            )
        return views

    def _describe_active(self, run: _Run) -> dict[str, Any]:
        described = []
        for node in run.nodes.values():
            reason = None
            if node.row.state == "queued":
                found = self._reason(str(node.row.call_id))
                reason = found.text if found is not None else None
            node.row.events = list(node.events)
            described.append((node.row, reason, node.event_count))
        return describe_run(run.row, described)


def _duration(row: NodeRow) -> float | None:
    if row.started_at is None or row.ended_at is None:
        return None
    return round(row.ended_at - row.started_at, 6)


def describe_run(
    row: RunRow, nodes: Sequence[tuple[NodeRow, str | None, int | None]]
) -> dict[str, Any]:
    """The JSON a client sees for a run (``GET /runs/{id}``)."""
    node_views = []
    for node, reason, event_count in nodes:
        events = node.events or []
        node_views.append(
            {
                "id": node.node_id,
                "state": node.state,
                "reason": reason,
                "ran_on": node.place,
                "queued_at": iso8601(node.queued_at),
                "started_at": iso8601(node.started_at),
                "ended_at": iso8601(node.ended_at),
                "duration_s": _duration(node),
                "result": node.result,
                "error": node.error,
                "logs": node.logs,
                "events": events,
                "event_count": event_count if event_count is not None else len(events),
            }
        )
    run_reason = next((view["reason"] for view in node_views if view["reason"]), None)
    artifacts = [
        {"node": view["id"], **ref} for view in node_views for ref in _artifact_refs(view["result"])
    ]
    return {
        "id": row.id,
        "flow": row.flow,
        "state": row.state,
        "reason": run_reason if row.state == "queued" else None,
        "params": row.params,
        "created_at": iso8601(row.created_at),
        "started_at": iso8601(row.started_at),
        "ended_at": iso8601(row.ended_at),
        "nodes": node_views,
        "artifacts": artifacts,
    }


def _artifact_refs(value: Any) -> list[dict[str, Any]]:
    """The artifact references inside a result (``{"digest": "sha256:...", "size", ...}``)."""
    if isinstance(value, dict):
        digest = value.get("digest")
        if isinstance(digest, str) and digest.startswith("sha256:") and "size" in value:
            return [value]
        return [ref for item in value.values() for ref in _artifact_refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in _artifact_refs(item)]
    return []
