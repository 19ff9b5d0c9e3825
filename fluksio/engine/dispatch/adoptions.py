"""The dispatcher's calls awaiting their worker after the engine restarted.

A restart finds calls that were running on workers (the run machine's
:class:`~fluksio.engine.runs.machine.effects.AwaitWorker`): each waits in this table for the
worker that holds it (:mod:`fluksio.engine.workers.connection.holder`: its token, name and process;
never its name alone, which workers share) for ``worker_return_s`` from the start. When
that worker attaches, :meth:`Adoptions.returning` sorts the calls it holds by what its
hello says:

- named in ``resume`` (our agent kept it through the engine's absence): adopted, with
  :meth:`Adoptions.adopt` once its session is attached: it holds its place again, and its
  answer ends it as if the engine had never gone;
- not named, by a worker that names what it holds: its run frame never reached the
  worker, so it goes back in line (``NotTaken``, no attempt spent);
- a worker that names nothing: the published agent, which cannot resume
  (``EngineRestarted``), or our agent started again (``WorkerGone``: the call died with
  the worker); so does one of the same token and name that is another process.

A worker of another token or another name gets nothing of a call it names: the call is
not handed to it, and goes on waiting for its own.

At the window's end the calls still awaited fail ``WorkerGone``. Either way a node that
says ``retry_on_restart`` runs again instead (:meth:`RunMachine.not_back`).

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState` and the dispatcher as its
:class:`~fluksio.engine.dispatch.state.Hub`.
"""

from __future__ import annotations

import asyncio

from fluksio.agent.launcher import CallOutcome, error_record
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.clock import Timer
from fluksio.engine.dispatch.calls import Calls
from fluksio.engine.dispatch.state import DispatchState, Hub
from fluksio.engine.runs.machine.effects import AwaitWorker
from fluksio.engine.runs.machine.redact import blankable, secret_names
from fluksio.engine.runs.views import Resumable
from fluksio.engine.workers.connection.holder import Holder, Verdict, sort_back
from fluksio.logs import get_logger

__all__ = ["Adoptions"]

log = get_logger("fluksio.engine.dispatch.dispatcher")
WORKER_RETURN_S = 300.0
"""How long after a restart a call found running on a worker waits for it (the setting
``worker_return_s``): the agent dials again within its back-off's cap (30 s), a relayed
one once its relay is back."""


class Adoptions:
    """The calls a restart found on workers, awaiting their worker."""

    def __init__(
        self, state: DispatchState, hub: Hub, calls: Calls, worker_return_s: float
    ) -> None:
        self._state = state
        self._hub = hub
        self._calls = calls
        self._return_s = worker_return_s
        self._awaiting: dict[str, AwaitWorker] = {}
        """The calls awaiting their worker, by call id."""
        self._window: Timer | None = None

    def await_worker(self, effect: AwaitWorker) -> None:
        self._awaiting[effect.request.id] = effect
        if self._window is None:
            self._window = self._state.clock.call_later(self._return_s, self._window_ended)
        log.info("call.awaiting_worker", call_id=effect.request.id, worker=effect.worker)

    def _window_ended(self) -> None:
        self._window = None
        if self._state.closing:
            return  # the next engine awaits them in turn
        said = (
            f"the engine restarted while this call ran on worker {{}}, which did not come back"
            f" within {self._return_s:g} s (--worker-return-s): a worker that takes longer"
            " to come back needs a longer --worker-return-s"
        )
        for call_id, call in list(self._awaiting.items()):
            self._give_up(call_id, ErrorKind.WORKER_GONE, said.format(call.worker))

    def _give_up(self, call_id: str, kind: ErrorKind, said: str) -> None:
        del self._awaiting[call_id]
        log.info("call.not_back", call_id=call_id, reason=said)
        self._hub.apply(
            self._state.machine.not_back(call_id, error_record(kind, said), self._state.clock.now())
        )

    def stop_awaited(self, call_id: str) -> bool:
        """A call awaiting its worker is stopped (its run cancelled): it ends now, as
        cancelled; if its worker comes back naming it, it is told to drop it. False: not
        awaited. At shutdown it stays awaited, for the next engine."""
        if call_id not in self._awaiting or self._state.closing:
            return False
        del self._awaiting[call_id]
        cancelled = error_record(ErrorKind.NODE_CANCELLED, "the run was cancelled")
        outcome = CallOutcome(False, error=cancelled)
        self._hub.apply(self._state.machine.ended(call_id, outcome, self._state.clock.now()))
        return True

    def returning(
        self, worker: str, back: Holder, resume: list[str] | None, *, published: bool
    ) -> list[AwaitWorker]:
        """Worker ``worker`` (held as ``back``) attaches naming ``resume`` (None: it names
        nothing): of the calls it holds, those it names, to adopt once it is attached; its
        others end now. Calls another worker holds are left awaiting theirs, whatever this
        one names (:func:`~fluksio.engine.workers.connection.holder.sort_back`)."""
        awaited = {call_id: (call.worker, call.holder) for call_id, call in self._awaiting.items()}
        verdicts = sort_back(awaited, worker, back, resume, published=published)
        for call_id in set(resume or ()) - verdicts.keys():
            if call_id in awaited:
                log.warning("call.claimed_by_another", call_id=call_id, worker=worker)
        adopting: list[AwaitWorker] = []
        for call_id, verdict in verdicts.items():
            if verdict is Verdict.ADOPT:
                adopting.append(self._awaiting.pop(call_id))
            else:
                kind, said = _given_up[verdict]
                self._give_up(call_id, kind, said.format(worker=worker))
        return adopting

    def adopt(self, calls: list[AwaitWorker], worker_id: str, executor: Resumable) -> None:
        """The calls ``returning`` gave go on where they run: booked on the worker again,
        their frames and answer taken from its session."""
        now = self._state.clock.now()
        for call in calls:
            call_id = call.request.id
            found = self._state.machine.call(call_id)
            if found is None:
                continue  # ended while the worker was being welcomed
            run, spec, row = found
            self._state.scheduler.adopt(call.request, worker_id, call.gpu_ids)
            # What it was given when placed (after it was queued), though changed or deleted
            # while the engine was down: it has them all the same. And what it has now.
            names = secret_names(spec.params).values()
            secrets = blankable(self._state.secrets.given_since(names, row.queued_at or 0.0))
            self._hub.apply(self._state.machine.adopted(call_id, secrets, now))
            key = self._state.live_logs.key(spec.id, row.item)
            self._state.live_logs.begin(call_id, run.id, key, row.attempt)
            running = executor.adopt(call_id, self._calls.on_event(call_id, secrets))
            task = asyncio.get_running_loop().create_task(
                self._calls.settle(call_id, running, executor, job_bound=spec.limit is None)
            )
            self._state.tasks.add(task)
            task.add_done_callback(self._state.tasks.discard)
            log.info("call.adopted", call_id=call_id, worker_id=worker_id, run_id=run.id)
        if calls:
            self._hub.changed()
            self._hub.place_changed(worker_id)


_given_up = {
    Verdict.NOT_TAKEN: (
        ErrorKind.NOT_TAKEN,
        "worker {worker} came back after the engine restarted without this call: its run"
        " frame never reached it; queued again",
    ),
    Verdict.PUBLISHED: (
        ErrorKind.ENGINE_RESTARTED,
        "the engine restarted while this call ran on worker {worker}, whose agent"
        " (fluksio-worker 0.1.x) cannot carry a call over an engine's restart",
    ),
    Verdict.STARTED_AGAIN: (
        ErrorKind.WORKER_GONE,
        "worker {worker} was started again while the engine was away: the call ended with"
        " its worker's process",
    ),
}
"""How a call its worker came back without ends, and what it says."""
