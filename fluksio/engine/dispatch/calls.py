"""The dispatcher's calls on their executors: a placed call run, its events told, its
outcome recorded.

A mixin of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, which gives what it uses; the
calls a restarted engine adopts (:mod:`.adoptions`) end here too.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.frames import LogFrame, ProgressFrame, RunFrame
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Clock
from fluksio.engine.runs.calls import stopped_at_job_end
from fluksio.engine.runs.live_logs import LiveLogs
from fluksio.engine.runs.machine.effects import Effect
from fluksio.engine.runs.machine.run_machine import RunMachine
from fluksio.engine.runs.views import Executor
from fluksio.engine.runs.writer import RunWriter
from fluksio.engine.stream import CallLogged, EngineStream
from fluksio.engine.workers.connection.holder import Holder
from fluksio.engine.workers.session_effects import CallEvent, EventCallback, SentAhead
from fluksio.logs import get_logger
from fluksio.scheduler import Placement, Scheduler

__all__ = ["CallShell"]

log = get_logger("fluksio.engine.dispatch.dispatcher")


class CallShell:
    _scheduler: Scheduler
    _machine: RunMachine
    _clock: Clock
    _closing: bool
    _margin: float
    _stream: EngineStream
    _writer: RunWriter
    live_logs: LiveLogs
    _lost_on: dict[Holder, list[tuple[float, str, str, int | None]]]
    """Calls lost with their worker's connection, which it may still run, by the worker
    that holds them, with that worker's deadline: each waits it out
    before it runs elsewhere, unless the worker is back first and is told to drop it."""

    if TYPE_CHECKING:  # given by the class it is mixed into

        def _apply(self, effects: list[Effect]) -> None:
            raise NotImplementedError

    async def _execute(
        self,
        executor: Executor,
        spec: RunFrame,
        placement: Placement,
        secrets: tuple[str, ...],
        *,
        written_first: bool,
    ) -> None:
        if written_first:
            self._writer.flush()  # the moment's rows (this pass's placements) at once
        running = executor.run(spec, self._on_event(spec.call_id, secrets))
        await self._settle(
            spec.call_id, running, executor, job_bound=placement.job_limit is not None
        )

    def _on_event(self, call_id: str, secrets: tuple[str, ...]) -> EventCallback:
        """What a running call's events do: lines kept, a start noted, the rest told."""

        def on_event(event: CallEvent) -> None:
            match event:
                case LogFrame():
                    self._logged(call_id, event.first, event.lines, secrets)
                case SentAhead():
                    self._apply(self._machine.sent_ahead(call_id))
                case ProgressFrame(event="started"):
                    self._apply(self._machine.started(call_id, self._clock.now()))
                case ProgressFrame():
                    # Kept as the run's record of it says it (``GET /runs/{id}``).
                    said = {"event": event.event, "outputs": event.outputs, "ts": event.ts}
                    self._apply(self._machine.reported(call_id, said))

        return on_event

    async def _settle(
        self,
        call_id: str,
        running: Awaitable[CallOutcome],
        executor: Executor,
        *,
        job_bound: bool,
    ) -> None:
        """Wait for a call's outcome and record it; ``job_bound``: its limit was its
        batch job's end (its node set none)."""
        try:
            outcome = await running
        except Exception as exc:
            log.exception("call.crashed", call_id=call_id)
            outcome = CallOutcome(False, error=error_record(ErrorKind.ENGINE_ERROR, str(exc)))
        self.live_logs.end(call_id)
        if self._closing:
            return  # stopped by the engine's shutdown: recovery decides, not this outcome
        if job_bound:
            provenance = executor.provenance()
            walltimes = {p.key: p.walltime_s for p in self._scheduler.profiles()}
            walltime = walltimes.get(provenance.provisioner or "")
            outcome = stopped_at_job_end(outcome, provenance, walltime, self._margin)
        if outcome.may_run_until is not None:
            self._lost(call_id, executor.holder(), outcome.may_run_until)
        self._apply(self._machine.ended(call_id, outcome, self._clock.now()))

    def _lost(self, call_id: str, holder: Holder | None, deadline: float) -> None:
        """A call lost with its worker's connection, which it may run until ``deadline``:
        remembered by who holds it, until that worker is back or the deadline passes."""
        found = self._machine.call(call_id)
        if holder is None or found is None:
            return
        run, spec, row = found
        self._forget_past_deadlines()
        self._lost_on.setdefault(holder, []).append((deadline, run.id, spec.id, row.item))

    def worker_back(self, holder: Holder) -> None:
        """The worker that holds ``holder``'s calls attached again and was told to drop
        those lost with its connection: their next attempts need not wait any more."""
        now = self._clock.now()
        for _deadline, run_id, node_id, item in self._lost_on.pop(holder, []):
            self._apply(self._machine.retry_due(run_id, node_id, now, item))

    def _forget_past_deadlines(self) -> None:
        """Lost calls whose worker's deadline has passed ran again (or will) on their own
        timers: nothing is kept of them, so a worker never back leaves nothing behind."""
        now = self._clock.now()
        for holder, lost in list(self._lost_on.items()):
            kept = [entry for entry in lost if entry[0] > now]
            if kept:
                self._lost_on[holder] = kept
            else:
                del self._lost_on[holder]

    def _logged(self, call_id: str, first: int, lines: list[str], secrets: tuple[str, ...]) -> None:
        """A running call wrote lines: kept for its readers, and told to the stream."""
        kept = self.live_logs.add(call_id, first, lines, secrets)
        call = self._machine.call(call_id)
        if kept and call is not None:
            run, node, row = call
            logged = CallLogged(
                run.id, run.flow, node.id, call_id, row.attempt, first, kept, row.item
            )
            self._stream.emit(logged)
