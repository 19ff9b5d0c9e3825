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
questions of its base, :class:`~fluksio.engine.dispatch.questions.DispatcherViews`, and a
running call's lines through :attr:`Dispatcher.live_logs`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Clock, Timer
from fluksio.engine.dispatch.adoptions import WORKER_RETURN_S
from fluksio.engine.dispatch.effects import RunEffects
from fluksio.engine.dispatch.questions import DispatcherViews
from fluksio.engine.dispatch.run_requests import RunRequests
from fluksio.engine.dispatch.worker_events import WorkerEvents
from fluksio.engine.runs.calls import call_frame
from fluksio.engine.runs.items import ArrayItems
from fluksio.engine.runs.live_logs import LiveLogs
from fluksio.engine.runs.machine.book import CRASH_LIMIT
from fluksio.engine.runs.machine.references import Ref
from fluksio.engine.runs.machine.restarts import ENGINE_PLACE
from fluksio.engine.runs.machine.rows import HeldItem, NodeRow, RunRow
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.runs.views import (
    Executor,
    RunView,
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


class Dispatcher(RunRequests, WorkerEvents, RunEffects, DispatcherViews):
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
        self._scheduler = Scheduler(engine, walltime_margin_s=walltime_margin_s)
        self.live_logs = LiveLogs(clock)
        """The lines running calls write (and those that ended lately): read, never
        changed, outside the dispatcher."""
        self._margin = walltime_margin_s
        self._executors: dict[str, Executor] = {ENGINE_ID: engine_executor}
        self._machine = RunMachine(_new_call_id, crash_limit)
        self._runs_store = runs
        self.items = items
        """An array's items still to run, and the rows of those started (read-only
        outside the dispatcher)."""
        self._flows = flows
        self._secrets = secrets
        self._init_adoptions(worker_return_s)
        self._lost_on = {}
        self._writer = RunWriter(runs, self._written, clock)
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiters: dict[str, asyncio.Event] = {}
        self._recently_ended: collections.OrderedDict[str, RunView] = collections.OrderedDict()
        """The runs that ended last, as written: the newest
        :data:`~fluksio.engine.dispatch.effects.ENDED_KEPT`."""
        self._pass_pending = False
        self._closing = False
        self._stream = stream
        self._clock = clock
        self._retention_due: Timer | None = None
        """The engine's one clock: rows keep its wall time, and workers report their batch
        job's end in it."""
        self.version = 0
        """Counts the changes to what the read-only questions below answer (places, the
        queue, placements, provisioning), so that an unchanged view is known unchanged
        without being built."""
        self.provisioning: ProvisioningDriver | None = None
        if provisioners:
            if engine_side is None:
                raise ValueError("provisioners need the engine's side (tokens, storage)")
            self.provisioning = ProvisioningDriver(
                provisioners,
                engine_side,
                on_change=self._provisioning_changed,
                emit=stream.emit,
                clock=clock,
                engine_address=engine_address,
            )
            self._scheduler.set_profiles(self.provisioning.scheduler_profiles())

    # -- starting and stopping ---------------------------------------------------------

    def recover(self, machine_requests: list[MachineRequest]) -> int:
        """Resume what an earlier engine left: machine requests first, then runs."""
        if self.provisioning is not None:
            self.provisioning.recover(machine_requests)
        found = self._runs_store.unfinished()
        held: dict[tuple[str, str], list[HeldItem]] = {}
        for run, nodes in found:  # an array's counts are written now and then: its rows'
            for node in nodes:
                if node.array is not None and node.state not in TERMINAL_NODE_STATES:
                    node.array = self.items.store.summary(run.id, node.node_id, node.array.total)
                    held[(run.id, node.node_id)] = self._held_items(run, node.node_id)
        settled: dict[Ref, NodeRow] = {}
        for run, _nodes in found:  # a result a run waits for, of a run since deleted: skipped
            with contextlib.suppress(InvalidInput):
                settled |= self._settled([run.params])
        self._apply(self._machine.recover(found, self._clock.now(), settled, held))
        if found:
            log.info("runs.recovered", count=len(found))
        self.kick()
        return len(found)

    def _held_items(self, run: RunRow, node_id: str) -> list[HeldItem]:
        """An array's items stored as running on workers, with their parameters: each
        awaits its worker, as a node's call does."""
        rows = self.items.store.held(run.id, node_id)
        if not rows:
            return []
        spec = next(n for n in FlowSpec.model_validate(run.spec).nodes if n.id == node_id)
        params = self.items.source.pick(spec, {row.item for row in rows if row.item is not None})
        return [(row, params[row.item]) for row in rows if row.item in params]

    def stopping(self) -> None:
        """The engine is going: nothing more starts, and how a call ends from now on is
        not recorded (its workers' sockets close first, failing their calls as gone)."""
        self._closing = True
        if self._retention_due is not None:
            self._retention_due.cancel()
        # Whoever waits on a run or its lines is answered now, as things stand: a long
        # poll left waiting would hold the stop up. Its client asks again once the
        # engine is back.
        for done in self._waiters.values():
            done.set()
        self.live_logs.close()

    async def close(self) -> None:
        """Cancel pending machine requests, then stop what executes, recording nothing of
        how it ended: a graceful stop leaves the state exactly as a crash would, so that
        the next engine's recovery treats both alike (``EngineRestarted``, or a retry)."""
        self.stopping()
        self._writer.closing = True
        if self.provisioning is not None:
            await self.provisioning.close()
        for call_id in list(self._machine.running_calls()):
            self._stop(call_id)
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=CLOSE_CALLS_S)
        self._writer.flush()

    async def written_through(self) -> None:
        """Return once every outcome already received is recorded in the store."""
        # An answer read before now set its call's future: the calls so woken record
        # their outcomes on the loop's next turn; then the marked rows are written.
        loop = asyncio.get_running_loop()
        turns: asyncio.Future[None] = loop.create_future()
        loop.call_soon(loop.call_soon, turns.set_result, None)
        await turns
        self._writer.flush()

    def _changed(self) -> None:
        self.version += 1
        self._stream.emit(VIEWS_CHANGED)

    def _place_changed(self, place_id: str) -> None:
        """A place's free amounts or standing changed (a call placed or done, a worker
        attached, silent or answering again)."""
        if place_id != ENGINE_ID:
            self._stream.emit(WorkerChanged(place_id))

    def _start(self, placement: Placement, now: float) -> None:
        """Hand a placed call to its place's executor (or fail it, if a secret it names
        may not go there)."""
        call_id = placement.request_id
        executor = self._executors[placement.worker_id]
        provenance = dataclasses.replace(
            executor.provenance(),
            gpu_ids=tuple(placement.gpu_ids),
            cached_bytes=placement.cached_bytes,
        )
        holder = executor.holder()
        inputs = self._machine.placed(
            call_id, self._place_name(placement.worker_id), provenance, now, holder
        )
        try:
            spec, released = call_frame(inputs, placement, executor, self._secrets)
        except SecretDenied as denied:
            refused = CallOutcome(False, error=error_record(ErrorKind.SECRET_DENIED, denied.detail))
            self._apply(self._machine.ended(call_id, refused, now))
            return
        self._apply(self._machine.running(call_id, released))
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
            self._execute(executor, spec, placement, released, written_first=durable)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _place_name(self, place_id: str) -> str:
        if place_id == ENGINE_ID:
            return ENGINE_PLACE
        view = self._scheduler.view(place_id)
        return view.name if view is not None else place_id

    # -- events from the provisioning driver ---------------------------------------------

    def _provisioning_changed(self) -> None:
        self._changed()
        assert self.provisioning is not None
        before = {p.key: (p.can_grow, p.bringing) for p in self._scheduler.profiles()}
        profiles = self.provisioning.scheduler_profiles()
        self._scheduler.set_profiles(profiles)
        # A new status only changes what waiting calls say; a pass is due when a profile
        # can be asked for again (or no longer): a request ended or went out, a rest ended,
        # or a job ended and freed a slot under max_workers; and when one stops bringing a
        # machine (its request failed): the next profile that fits may be asked instead.
        if any(before.get(p.key) != (p.can_grow, p.bringing) for p in profiles):
            self.kick()

    # -- the pass ----------------------------------------------------------------------

    def kick(self) -> None:
        """Run a scheduling pass soon: once for all the events of this moment."""
        if not self._pass_pending and not self._closing:
            self._pass_pending = True
            asyncio.get_running_loop().call_soon(self.run_pass)

    def run_pass(self) -> None:
        """One pass now: start what fits, ask for machines for what never could."""
        self._changed()
        self._pass_pending = False
        if self._closing:
            return
        now = self._clock.now()
        plan = self._scheduler.schedule(now)
        for placement in plan.placements:
            self._start(placement, now)
            self._place_changed(placement.worker_id)
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
            self.provisioning.wanted(self._scheduler.wanted_profiles())
