"""The dispatcher: the one owner of the scheduling loop.

It owns the :class:`~fluksio.scheduler.Scheduler`, every place's executor (the engine's
launcher and each attached worker's session), the provisioning driver and the run
manager. Everything else hands it events, and it runs one scheduling pass for all the
events of a moment:

- from the run manager: a call is ready (:meth:`submit`), withdrawn, or finished;
- from the attach socket: a worker attached or went away;
- from the provisioning driver: how a profile's request stands changed.

A pass starts the placements on their executors (through the run manager, which knows
the calls) and hands the plan's asks for machines to the driver. Nothing reaches through
the dispatcher to its scheduler: the API reads places, waiting calls and profiles through
the read-only questions at the end of this class.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from fluksio.api.logging import get_logger
from fluksio.api.runs.manager import Executor, RunManager
from fluksio.provisioners.base import Provisioner, WorkerEvent
from fluksio.provisioners.clock import Clock
from fluksio.provisioners.driver import (
    EngineSide,
    MachineRequest,
    ProfileStatus,
    ProvisioningDriver,
    ProvisioningObserver,
)
from fluksio.scheduler import (
    DEFAULT_WALLTIME_MARGIN_S,
    ENGINE_ID,
    CallRequest,
    PlaceView,
    Scheduler,
    WaitReason,
    Worker,
)

if TYPE_CHECKING:
    from fluksio.api.runs.store import FlowStore, RunStore
    from fluksio.api.secrets import SecretStore

__all__ = ["Dispatcher"]

log = get_logger(__name__)


class Dispatcher:
    def __init__(
        self,
        *,
        engine: Worker,
        engine_executor: Executor,
        runs: RunStore,
        flows: FlowStore,
        secrets: SecretStore,
        provisioners: Sequence[Provisioner[Any, Any]] = (),
        engine_side: EngineSide | None = None,
        plugin_events: pluggy.HookRelay | None = None,
        clock: Clock | None = None,
        walltime_margin_s: float = DEFAULT_WALLTIME_MARGIN_S,
        provisioning_observer: ProvisioningObserver | None = None,
    ) -> None:
        self._scheduler = Scheduler(engine, walltime_margin_s=walltime_margin_s)
        self._executors: dict[str, Executor] = {ENGINE_ID: engine_executor}
        self._pass_pending = False
        self._closing = False
        self._plugin_events = plugin_events
        self.version = 0
        """Counts the changes to what the read-only questions below answer (places, the
        queue, placements, provisioning), so that an unchanged view is known unchanged
        without being built."""
        self.on_change: Callable[[], None] = lambda: None
        """Told whenever :attr:`version` moves (the live feed looks at the views then)."""
        self.on_place_change: Callable[[str], None] = lambda _place_id: None
        """Told of a place whose free amounts or standing changed (a call placed or done,
        a worker attached, silent or answering again)."""
        self.runs = RunManager(runs=runs, flows=flows, secrets=secrets, dispatch=self)
        self.provisioning: ProvisioningDriver | None = None
        if provisioners:
            if engine_side is None:
                raise ValueError("provisioners need the engine's side (tokens, storage)")
            self.provisioning = ProvisioningDriver(
                provisioners,
                engine_side,
                on_change=self._provisioning_changed,
                clock=clock,
                observer=provisioning_observer,
            )
            self._scheduler.set_profiles(self.provisioning.scheduler_profiles())

    # -- starting and stopping ---------------------------------------------------------

    def recover(self, machine_requests: list[MachineRequest]) -> int:
        """Resume what an earlier engine left: machine requests first, then runs."""
        if self.provisioning is not None:
            self.provisioning.recover(machine_requests)
        return self.runs.recover()

    async def close(self) -> None:
        """Cancel pending machine requests, then stop what executes (recovery decides)."""
        self._closing = True
        if self.provisioning is not None:
            await self.provisioning.close()
        await self.runs.close()

    def _changed(self) -> None:
        self.version += 1
        self.on_change()

    # -- events from the run manager ---------------------------------------------------

    def submit(self, request: CallRequest) -> None:
        """A call is ready to run."""
        self._changed()
        self._scheduler.submit(request)
        self.kick()

    def withdraw(self, call_id: str) -> bool:
        """Take a waiting call out of the queue; False when it is not waiting."""
        self._changed()
        return self._scheduler.withdraw(call_id)

    def finished(self, call_id: str) -> None:
        """A placed call ended: give back what it took (unless its worker went meanwhile)."""
        self._changed()
        allocation = self._scheduler.allocation(call_id)
        if allocation is not None:
            self._scheduler.finish(call_id)
            self.on_place_change(allocation.place_id)
        self.kick()

    def cancel_running(self, call_id: str) -> bool:
        """Ask the executor running ``call_id`` to stop it."""
        executor = self._executors.get(self.placed_on(call_id))
        return executor.cancel(call_id) if executor is not None else False

    # -- events from attached workers ---------------------------------------------------

    def worker_attached(self, worker: Worker, executor: Executor, event: WorkerEvent) -> None:
        """A worker attached: it can take calls from the next pass on."""
        self._changed()
        self._executors[worker.id] = executor
        self._scheduler.add_worker(worker)
        self.on_place_change(worker.id)
        if self.provisioning is not None:
            self.provisioning.worker_attached(event)
        if self._plugin_events is not None:
            self._plugin_events.fluksio_worker_attached(worker=event)
        self.kick()

    def worker_gone(self, event: WorkerEvent) -> None:
        """A worker is gone; its executor has already failed its calls in flight."""
        self._changed()
        self._executors.pop(event.worker_id, None)
        if self._scheduler.has_place(event.worker_id):
            self._scheduler.remove_worker(event.worker_id)
        if self.provisioning is not None:
            self.provisioning.worker_gone(event)
        if self._plugin_events is not None:
            self._plugin_events.fluksio_worker_gone(worker=event)
        self.kick()

    def set_answering(self, worker_id: str, answering: bool) -> None:
        """A worker stopped answering (nothing new for it) or answers again."""
        self._changed()
        if self._scheduler.has_place(worker_id):
            self._scheduler.set_paused(worker_id, not answering)
            self.on_place_change(worker_id)
            log.info("worker.answering" if answering else "worker.silent", worker_id=worker_id)
            self.kick()

    # -- events from the provisioning driver ---------------------------------------------

    def _provisioning_changed(self) -> None:
        self._changed()
        assert self.provisioning is not None
        before = {p.key: p.can_grow for p in self._scheduler.profiles()}
        profiles = self.provisioning.scheduler_profiles()
        self._scheduler.set_profiles(profiles)
        # A new status only changes what waiting calls say; a pass is due when a profile
        # can be asked for again (or no longer): a request ended or went out, a rest ended,
        # or a job ended and freed a slot under max_workers.
        if any(before.get(p.key) != p.can_grow for p in profiles):
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
        # Wall-clock time: workers report when their batch job ends as a Unix time.
        plan = self._scheduler.schedule(time.time())
        for placement in plan.placements:
            self.runs.launch(placement, self._executors[placement.worker_id])
            self.on_place_change(placement.worker_id)
        for ask in plan.asks:
            log.info(
                "provision.wanted",
                provisioner=ask.provisioner,
                profile=ask.profile,
                call_id=ask.request_id,
            )
            if self.provisioning is not None:
                self.provisioning.want(ask.provisioner, ask.profile)

    # -- questions (read-only) ---------------------------------------------------------

    def reason(self, call_id: str) -> WaitReason | None:
        """Why a call waits, with how the provisioning it waits for stands now."""
        now = self.provisioning.now() if self.provisioning is not None else None
        return self._scheduler.reason(call_id, now)

    def waiting(self) -> list[str]:
        """Ids of the waiting calls, in the order they will be served."""
        return self._scheduler.waiting()

    def has_waiting(self) -> bool:
        return self._scheduler.has_waiting()

    def placed_on(self, call_id: str) -> str:
        allocation = self._scheduler.allocation(call_id)
        return allocation.place_id if allocation is not None else ENGINE_ID

    def place(self, place_id: str) -> PlaceView | None:
        return self._scheduler.view(place_id)

    def profiles(self) -> list[ProfileStatus]:
        return self.provisioning.profiles() if self.provisioning is not None else []
