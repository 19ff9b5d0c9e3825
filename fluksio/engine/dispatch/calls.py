"""The dispatcher's calls on their executors: a placed call run, its events told, its
outcome recorded.

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState` and the dispatcher as its
:class:`~fluksio.engine.dispatch.state.Hub`. The calls a restarted engine adopts
(:mod:`.adoptions`) end here too.
"""

from __future__ import annotations

from collections.abc import Awaitable

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.frames import LogFrame, ProgressFrame, RunFrame
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.engine.dispatch.state import DispatchState, Hub
from fluksio.engine.runs.calls import stopped_at_job_end
from fluksio.engine.runs.views import Executor
from fluksio.engine.stream import CallLogged
from fluksio.engine.workers.connection.holder import Holder
from fluksio.engine.workers.session_effects import CallEvent, EventCallback, SentAhead
from fluksio.logs import get_logger
from fluksio.scheduler import Placement

__all__ = ["Calls"]

log = get_logger("fluksio.engine.dispatch.dispatcher")


class Calls:
    """A placed call on its executor: its events told as they come, its outcome recorded;
    a call lost with its worker's connection waits out that worker's deadline."""

    def __init__(self, state: DispatchState, hub: Hub) -> None:
        self._state = state
        self._hub = hub

    async def execute(
        self,
        executor: Executor,
        spec: RunFrame,
        placement: Placement,
        secrets: tuple[str, ...],
        *,
        written_first: bool,
    ) -> None:
        if written_first:
            self._state.writer.flush()  # the moment's rows (this pass's placements) at once
        running = executor.run(spec, self.on_event(spec.call_id, secrets))
        await self.settle(
            spec.call_id, running, executor, job_bound=placement.job_limit is not None
        )

    def on_event(self, call_id: str, secrets: tuple[str, ...]) -> EventCallback:
        """What a running call's events do: lines kept, a start noted, the rest told."""

        def on_event(event: CallEvent) -> None:
            match event:
                case LogFrame():
                    self._logged(call_id, event.first, event.lines, secrets)
                case SentAhead():
                    self._hub.apply(self._state.machine.sent_ahead(call_id))
                case ProgressFrame(event="started"):
                    self._hub.apply(self._state.machine.started(call_id, self._state.clock.now()))
                case ProgressFrame():
                    # Kept as the run's record of it says it (``GET /runs/{id}``).
                    said = {"event": event.event, "outputs": event.outputs, "ts": event.ts}
                    self._hub.apply(self._state.machine.reported(call_id, said))

        return on_event

    async def settle(
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
        self._state.live_logs.end(call_id)
        if self._state.closing:
            return  # stopped by the engine's shutdown: recovery decides, not this outcome
        if job_bound:
            provenance = executor.provenance()
            walltimes = {p.key: p.walltime_s for p in self._state.scheduler.profiles()}
            walltime = walltimes.get(provenance.provisioner or "")
            outcome = stopped_at_job_end(outcome, provenance, walltime, self._state.margin)
        if outcome.may_run_until is not None:
            self._lost(call_id, executor.holder(), outcome.may_run_until)
        self._hub.apply(self._state.machine.ended(call_id, outcome, self._state.clock.now()))

    def _lost(self, call_id: str, holder: Holder | None, deadline: float) -> None:
        """A call lost with its worker's connection, which it may run until ``deadline``:
        remembered by who holds it, until that worker is back or the deadline passes."""
        found = self._state.machine.call(call_id)
        if holder is None or found is None:
            return
        run, spec, row = found
        self._forget_past_deadlines()
        self._state.lost_on.setdefault(holder, []).append((deadline, run.id, spec.id, row.item))

    def worker_back(self, holder: Holder) -> None:
        """The worker that holds ``holder``'s calls attached again and was told to drop
        those lost with its connection: their next attempts need not wait any more."""
        now = self._state.clock.now()
        for _deadline, run_id, node_id, item in self._state.lost_on.pop(holder, []):
            self._hub.apply(self._state.machine.retry_due(run_id, node_id, now, item))

    def _forget_past_deadlines(self) -> None:
        """Lost calls whose worker's deadline has passed ran again (or will) on their own
        timers: nothing is kept of them, so a worker never back leaves nothing behind."""
        now = self._state.clock.now()
        for holder, lost in list(self._state.lost_on.items()):
            kept = [entry for entry in lost if entry[0] > now]
            if kept:
                self._state.lost_on[holder] = kept
            else:
                del self._state.lost_on[holder]

    def _logged(self, call_id: str, first: int, lines: list[str], secrets: tuple[str, ...]) -> None:
        """A running call wrote lines: kept for its readers, and told to the stream."""
        kept = self._state.live_logs.add(call_id, first, lines, secrets)
        call = self._state.machine.call(call_id)
        if kept and call is not None:
            run, node, row = call
            logged = CallLogged(
                run.id, run.flow, node.id, call_id, row.attempt, first, kept, row.item
            )
            self._state.stream.emit(logged)
