"""The dispatcher: the engine core's one asynchronous shell.

It owns the :class:`~fluksio.scheduler.Scheduler`, the run machine
(:class:`~fluksio.engine.runs.machine.run_machine.RunMachine`), every place's executor (the engine's
launcher and each attached worker's session), the run store's writer and the
provisioning driver. Everything else hands it events:

- from the API: a run is started or cancelled;
- from executors: a call reported an event or ended;
- from the attach socket: a worker attached, went away, stopped or resumed answering;
- from the provisioning driver: how a profile's request stands changed.

The run machine decides what follows from each (queue this call, write these rows, stop
that one) and the dispatcher carries the effects out. One scheduling pass runs for all the
events of a moment: it starts the placements on their executors and hands the plan's asks
for machines to the driver. Nothing reaches through the dispatcher to its scheduler or
machine: the API reads runs, places, waiting calls and profiles through the read-only
questions of its part :class:`~fluksio.engine.dispatch.questions.Questions`, and a
running call's lines through :attr:`Dispatcher.live_logs`. Its parts share one
:class:`~fluksio.engine.dispatch.state.DispatchState` (:mod:`.state`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Clock
from fluksio.engine.dispatch.adoptions import WORKER_RETURN_S, Adoptions
from fluksio.engine.dispatch.calls import Calls
from fluksio.engine.dispatch.effects import Effects
from fluksio.engine.dispatch.questions import Questions
from fluksio.engine.dispatch.run_requests import RunRequests
from fluksio.engine.dispatch.state import DispatchState
from fluksio.engine.dispatch.worker_events import WorkerEvents
from fluksio.engine.runs.calls import call_frame
from fluksio.engine.runs.items import ArrayItems
from fluksio.engine.runs.live_logs import LiveLogs
from fluksio.engine.runs.machine.book import CRASH_LIMIT
from fluksio.engine.runs.machine.effects import Effect
from fluksio.engine.runs.machine.references import Ref
from fluksio.engine.runs.machine.restarts import ENGINE_PLACE
from fluksio.engine.runs.machine.rows import HeldItem, NodeRow, RunRow
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.runs.views import (
    Executor,
    RunChange,
)
from fluksio.engine.runs.writer import RunWriter
from fluksio.engine.secrets import SecretDenied
from fluksio.engine.stream import (
    VIEWS_CHANGED,
    EngineStream,
    WorkerChanged,
)
from fluksio.errors import InvalidInput
from fluksio.logs import get_logger
from fluksio.provisioners.driver import ProvisioningDriver
from fluksio.provisioners.engine_side import EngineSide
from fluksio.provisioners.machine.requests import MachineRequest
from fluksio.provisioners.provisioner import Provisioner
from fluksio.scheduler import (
    DEFAULT_WALLTIME_MARGIN_S,
    ENGINE_ID,
    Placement,
    Scheduler,
    Worker,
)
from fluksio.wire.flows import FlowSpec
from fluksio.wire.states import TERMINAL_NODE_STATES

if TYPE_CHECKING:
    from fluksio.engine.runs.store import FlowStore, RunStore
    from fluksio.engine.secrets import SecretStore

__all__ = ["Dispatcher"]

log = get_logger(__name__)
CLOSE_CALLS_S = 3.0
"""At shutdown, how long the calls being stopped get to end (within the engine's stop
bound, ``fluksio.engine.holding.STOP_WITHIN_S``; a call's process tree is killed, so
this is the time to reap it)."""


def _new_call_id() -> str:
    return secrets.token_hex(8)


class Dispatcher:
    """The shell: it owns a :class:`~fluksio.engine.dispatch.state.DispatchState` and its
    parts, each given the state and, for what belongs to another part, this dispatcher as
    their :class:`~fluksio.engine.dispatch.state.Hub`. What the engine, the API and the
    worker connections ask of it are its parts' methods, as its own."""

    def __init__(
        self,
        *,
        engine: Worker,
        engine_executor: Executor,
        runs: RunStore,
        flows: FlowStore,
        secrets: SecretStore,
        stream: EngineStream,
        provisioners: Sequence[Provisioner[Any, Any]] = (),
        engine_side: EngineSide | None = None,
        clock: Clock,
        walltime_margin_s: float = DEFAULT_WALLTIME_MARGIN_S,
        engine_address: tuple[str, int] | None = None,
        items: ArrayItems,
        worker_return_s: float = WORKER_RETURN_S,
        crash_limit: int = CRASH_LIMIT,
    ) -> None:
        self._state = state = DispatchState(
            scheduler=Scheduler(engine, walltime_margin_s=walltime_margin_s),
            machine=RunMachine(_new_call_id, crash_limit),
            clock=clock,
            stream=stream,
            executors={ENGINE_ID: engine_executor},
            runs_store=runs,
            flows=flows,
            secrets=secrets,
            items=items,
            live_logs=LiveLogs(clock),
            margin=walltime_margin_s,
            writer=RunWriter(runs, self._written, clock),
        )
        self.live_logs = state.live_logs
        """The lines running calls write (and those that ended lately): read, never
        changed, outside the dispatcher."""
        self.items = items
        """An array's items still to run, and the rows of those started (read-only
        outside the dispatcher)."""
        self._questions = Questions(state)
        self._calls = Calls(state, self)
        self._adoptions = Adoptions(state, self, self._calls, worker_return_s)
        self._effects = Effects(state, self, self._adoptions, self._questions)
        self._runs = RunRequests(state, self, self._questions)
        self._workers = WorkerEvents(state, self)
        # What is asked of it, answered by its parts.
        questions, runs_asked, workers = self._questions, self._runs, self._workers
        self.write_marked, self.view_run = questions.write_marked, questions.view_run
        self.item_row, self.wait_run = questions.item_row, questions.wait_run
        self.waiting_calls, self.waiting_labels = questions.waiting_calls, questions.waiting_labels
        self.unwritten_runs, self.failed_writes = questions.unwritten_runs, questions.failed_writes
        self.answering, self.calls_on = questions.answering, questions.calls_on
        self.reason, self.has_waiting = questions.reason, questions.has_waiting
        self.placed_on, self.place = questions.placed_on, questions.place
        self.profiles, self.oldest_call_started = questions.profiles, questions.oldest_call_started
        self.start_run, self.cancel_run = runs_asked.start_run, runs_asked.cancel_run
        self.cancel_items, self.retry_failed = runs_asked.cancel_items, runs_asked.retry_failed
        self.delete_run, self.forget_runs = runs_asked.delete_run, runs_asked.forget_runs
        self.keep_runs_for = runs_asked.keep_runs_for
        self.worker_attached, self.worker_gone = workers.worker_attached, workers.worker_gone
        self.set_cached, self.saved_by = workers.set_cached, workers.saved_by
        self.set_stopping, self.set_answering = workers.set_stopping, workers.set_answering
        self.worker_back = self._calls.worker_back
        self.returning, self.adopt = self._adoptions.returning, self._adoptions.adopt
        self.provisioning: ProvisioningDriver | None = None
        if provisioners:
            if engine_side is None:
                raise ValueError("provisioners need the engine's side (tokens, storage)")
            self.provisioning = state.provisioning = ProvisioningDriver(
                provisioners,
                engine_side,
                on_change=self._provisioning_changed,
                emit=stream.emit,
                clock=clock,
                engine_address=engine_address,
            )
            state.scheduler.set_profiles(self.provisioning.scheduler_profiles())

    @property
    def version(self) -> int:
        """Counts the changes to what the read-only questions answer (places, the queue,
        placements, provisioning), so that an unchanged view is known unchanged without
        being built."""
        return self._state.version

    # -- what the parts ask of the whole (Hub) -------------------------------------------

    def apply(self, effects: list[Effect]) -> None:
        self._effects.apply(effects)

    def stop(self, call_id: str) -> None:
        self._effects.stop(call_id)

    def _written(self, changes: Sequence[RunChange]) -> None:
        self._effects.written(changes)

    # -- starting and stopping ---------------------------------------------------------

    def recover(self, machine_requests: list[MachineRequest]) -> int:
        """Resume what an earlier engine left: machine requests first, then runs."""
        if self.provisioning is not None:
            self.provisioning.recover(machine_requests)
        found = self._state.runs_store.unfinished()
        held: dict[tuple[str, str], list[HeldItem]] = {}
        for run, nodes in found:  # an array's counts are written now and then: its rows'
            for node in nodes:
                if node.array is not None and node.state not in TERMINAL_NODE_STATES:
                    node.array = self._state.items.store.summary(
                        run.id, node.node_id, node.array.total
                    )
                    held[(run.id, node.node_id)] = self._held_items(run, node.node_id)
        settled: dict[Ref, NodeRow] = {}
        for run, _nodes in found:  # a result a run waits for, of a run since deleted: skipped
            with contextlib.suppress(InvalidInput):
                settled |= self._runs.settled([run.params])
        self.apply(self._state.machine.recover(found, self._state.clock.now(), settled, held))
        if found:
            log.info("runs.recovered", count=len(found))
        self.kick()
        return len(found)

    def _held_items(self, run: RunRow, node_id: str) -> list[HeldItem]:
        """An array's items stored as running on workers, with their parameters: each
        awaits its worker, as a node's call does."""
        rows = self._state.items.store.held(run.id, node_id)
        if not rows:
            return []
        spec = next(n for n in FlowSpec.model_validate(run.spec).nodes if n.id == node_id)
        params = self._state.items.source.pick(
            spec, {row.item for row in rows if row.item is not None}
        )
        return [(row, params[row.item]) for row in rows if row.item in params]

    def stopping(self) -> None:
        """The engine is going: nothing more starts, and how a call ends from now on is
        not recorded (its workers' sockets close first, failing their calls as gone)."""
        self._state.closing = True
        if self._state.retention_due is not None:
            self._state.retention_due.cancel()
        # Whoever waits on a run or its lines is answered now, as things stand: a long
        # poll left waiting would hold the stop up. Its client asks again once the
        # engine is back.
        for done in self._state.waiters.values():
            done.set()
        self.live_logs.close()

    async def close(self) -> None:
        """Cancel pending machine requests, then stop what executes, recording nothing of
        how it ended: a graceful stop leaves the state exactly as a crash would, so that
        the next engine's recovery treats both alike (``EngineRestarted``, or a retry)."""
        self.stopping()
        self._state.writer.closing = True
        if self.provisioning is not None:
            await self.provisioning.close()
        for call_id in list(self._state.machine.running_calls()):
            self.stop(call_id)
        if self._state.tasks:
            await asyncio.wait(list(self._state.tasks), timeout=CLOSE_CALLS_S)
        self._state.writer.flush()

    async def written_through(self) -> None:
        """Return once every outcome already received is recorded in the store."""
        # An answer read before now set its call's future: the calls so woken record
        # their outcomes on the loop's next turn; then the marked rows are written.
        loop = asyncio.get_running_loop()
        turns: asyncio.Future[None] = loop.create_future()
        loop.call_soon(loop.call_soon, turns.set_result, None)
        await turns
        self._state.writer.flush()

    def changed(self) -> None:
        self._state.version += 1
        self._state.stream.emit(VIEWS_CHANGED)

    def place_changed(self, place_id: str) -> None:
        """A place's free amounts or standing changed (a call placed or done, a worker
        attached, silent or answering again)."""
        if place_id != ENGINE_ID:
            self._state.stream.emit(WorkerChanged(place_id))

    def _start(self, placement: Placement, now: float) -> None:
        """Hand a placed call to its place's executor (or fail it, if a secret it names
        may not go there)."""
        call_id = placement.request_id
        executor = self._state.executors[placement.worker_id]
        provenance = dataclasses.replace(
            executor.provenance(),
            gpu_ids=tuple(placement.gpu_ids),
            cached_bytes=placement.cached_bytes,
        )
        holder = executor.holder()
        inputs = self._state.machine.placed(
            call_id, self._place_name(placement.worker_id), provenance, now, holder
        )
        try:
            spec, released = call_frame(inputs, placement, executor, self._state.secrets)
        except SecretDenied as denied:
            refused = CallOutcome(False, error=error_record(ErrorKind.SECRET_DENIED, denied.detail))
            self.apply(self._state.machine.ended(call_id, refused, now))
            return
        self.apply(self._state.machine.running(call_id, released))
        key = self.live_logs.key(inputs.spec.id, inputs.position)
        self.live_logs.begin(call_id, inputs.run.id, key, inputs.attempt)
        # Written before the call starts, with the moment's other rows: a worker's call
        # may outlive this engine, to be adopted by the next one, which knows of it only
        # from the store; and a call started on a node's result (on the engine too) must
        # not run while that result is unwritten, or a crash then loses the result it ran
        # on. An item on a worker is adopted alike, so it is written first too; one in the
        # engine's process need not be: a restart runs it again (or fails it).
        durable = inputs.position is None or holder is not None
        task = asyncio.get_running_loop().create_task(
            self._calls.execute(executor, spec, placement, released, written_first=durable)
        )
        self._state.tasks.add(task)
        task.add_done_callback(self._state.tasks.discard)

    def _place_name(self, place_id: str) -> str:
        if place_id == ENGINE_ID:
            return ENGINE_PLACE
        view = self._state.scheduler.view(place_id)
        return view.name if view is not None else place_id

    # -- events from the provisioning driver ---------------------------------------------

    def _provisioning_changed(self) -> None:
        self.changed()
        assert self.provisioning is not None
        before = {p.key: (p.can_grow, p.bringing) for p in self._state.scheduler.profiles()}
        profiles = self.provisioning.scheduler_profiles()
        self._state.scheduler.set_profiles(profiles)
        # A new status only changes what waiting calls say; a pass is due when a profile
        # can be asked for again (or no longer): a request ended or went out, a rest ended,
        # or a job ended and freed a slot under max_workers; and when one stops bringing a
        # machine (its request failed): the next profile that fits may be asked instead.
        if any(before.get(p.key) != (p.can_grow, p.bringing) for p in profiles):
            self.kick()

    # -- the pass ----------------------------------------------------------------------

    def kick(self) -> None:
        """Run a scheduling pass soon: once for all the events of this moment."""
        if not self._state.pass_pending and not self._state.closing:
            self._state.pass_pending = True
            asyncio.get_running_loop().call_soon(self.run_pass)

    def run_pass(self) -> None:
        """One pass now: start what fits, ask for machines for what never could."""
        self.changed()
        self._state.pass_pending = False
        if self._state.closing:
            return
        now = self._state.clock.now()
        plan = self._state.scheduler.schedule(now)
        for placement in plan.placements:
            self._start(placement, now)
            self.place_changed(placement.worker_id)
        for ask in plan.asks:
            log.info(
                "provision.wanted",
                provisioner=ask.provisioner,
                profile=ask.profile,
                call_id=ask.request_id,
            )
            if self.provisioning is not None:
                self.provisioning.want(ask.provisioner, ask.profile)
        if self.provisioning is not None:
            self.provisioning.wanted(self._state.scheduler.wanted_profiles())
