"""What the dispatcher's parts share, named once: the state the shell owns, and the moves a
part asks of the whole.

:class:`~fluksio.engine.dispatch.dispatcher.Dispatcher` owns one :class:`DispatchState`
and its parts (its questions, a call on its executor, the calls awaiting their worker, the
run machine's effects carried out, runs asked for, workers' events), each given the state
and, for what belongs to another part, the dispatcher as their :class:`Hub`.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from fluksio.clock import Clock, Timer
from fluksio.engine.runs.items import ArrayItems
from fluksio.engine.runs.live_logs import LiveLogs
from fluksio.engine.runs.machine.effects import Effect
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.runs.views import Executor, RunView
from fluksio.engine.runs.writer import RunWriter
from fluksio.engine.stream import EngineStream
from fluksio.engine.workers.connection.holder import Holder
from fluksio.provisioners.driver import ProvisioningDriver
from fluksio.scheduler import Scheduler

if TYPE_CHECKING:
    from fluksio.engine.runs.store import FlowStore, RunStore
    from fluksio.engine.secrets import SecretStore

__all__ = ["DispatchState", "Hub"]


@dataclass(eq=False)
class DispatchState:
    """The dispatcher's state: its scheduler and run machine, every place's executor, the
    store's writer, and what waits on them."""

    scheduler: Scheduler
    machine: RunMachine
    clock: Clock
    """The engine's one clock: rows keep its wall time, and workers report their batch
    job's end in it."""
    stream: EngineStream
    executors: dict[str, Executor]
    runs_store: RunStore
    flows: FlowStore
    secrets: SecretStore
    items: ArrayItems
    """An array's items still to run, and the rows of those started."""
    live_logs: LiveLogs
    """The lines running calls write (and those that ended lately)."""
    margin: float
    """The walltime margin: a call whose limit was its job's end stops this long before."""
    writer: RunWriter
    provisioning: ProvisioningDriver | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    waiters: dict[str, asyncio.Event] = field(default_factory=dict)
    recently_ended: collections.OrderedDict[str, RunView] = field(
        default_factory=collections.OrderedDict
    )
    """The runs that ended last, as written: the newest
    :data:`~fluksio.engine.dispatch.effects.ENDED_KEPT`."""
    lost_on: dict[Holder, list[tuple[float, str, str, int | None]]] = field(default_factory=dict)
    """Calls lost with their worker's connection, which it may still run, by the worker
    that holds them, with that worker's deadline: each waits it out before it runs
    elsewhere, unless the worker is back first and is told to drop it."""
    retention_due: Timer | None = None
    pass_pending: bool = False
    closing: bool = False
    version: int = 0
    """Counts the changes to what the read-only questions answer (places, the queue,
    placements, provisioning), so that an unchanged view is known unchanged without being
    built."""


class Hub(Protocol):
    """What a part of the dispatcher asks of the whole."""

    def apply(self, effects: list[Effect]) -> None:
        """Carry out what the run machine decided."""
        ...

    def changed(self) -> None:
        """What the read-only questions answer changed."""
        ...

    def place_changed(self, place_id: str) -> None:
        """A place's free amounts or standing changed."""
        ...

    def kick(self) -> None:
        """Run a scheduling pass soon."""
        ...

    def run_pass(self) -> None:
        """Run a scheduling pass now."""
        ...

    def stop(self, call_id: str) -> None:
        """Stop a running call."""
        ...
