"""The run machine across the engine's restart: a call that was running on a worker
waits for that worker to come back naming it, and is adopted, exactly once; or it is
given up on.

A mixin of :class:`~fluksio.engine.runs.machine.RunMachine`, on the rules of
:class:`~fluksio.engine.runs.machine_rules.MachineRules`. The window a call waits and
who came back are its owner's to tell (the dispatcher's awaiting table); the machine
only keeps the node running meanwhile, so that nothing else of its run moves on a
result that is still to come.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fluksio.agent.outcome import CallOutcome
from fluksio.engine.runs.effects import AwaitWorker, Effect, Progress, Release
from fluksio.engine.runs.machine_rules import MachineRules
from fluksio.engine.runs.machine_state import LiveNode, LiveRun
from fluksio.wire.states import NodeState

__all__ = ["ENGINE_PLACE", "RESTARTED", "AdoptMoves"]

ENGINE_PLACE = "engine"
"""The place name of calls run in the engine's own process: they die with it."""
RESTARTED = "the engine restarted while this node was executing"


class AdoptMoves(MachineRules):
    def adopted(self, call_id: str, secrets: tuple[str, ...], now: float) -> list[Effect]:
        """Its worker came back naming the call: it goes on there, and its answer (with
        ``secrets`` blanked, as when it was placed) ends it as any call's does."""
        found = self._calls.get(call_id)
        if found is None:
            return []
        run, node = found
        node.secrets = secrets
        node.note("adopted", now, worker=node.row.place, after=RESTARTED)
        return [Progress(run.row, node.row, node.event_count)]

    def not_back(self, call_id: str, error: dict[str, str], now: float) -> list[Effect]:
        """The call will not be adopted (``error`` says why): a node that says
        ``retry_on_restart`` runs it again from its start, as a new attempt; any other
        ends with ``error``, retried as its policy says of that kind."""
        found = self._calls.get(call_id)
        if found is None:
            return []
        run, node = found
        if not node.spec.retry_on_restart or run.cancelling:
            return self.ended(call_id, CallOutcome(False, error=error), now)
        before = node.row.state
        effects: list[Effect] = [Release(self._forget_call(node))]
        node.row.state = NodeState.PENDING
        node.row.attempt += 1
        node.note("rerun", now, attempt=node.row.attempt, after=error.get("message", RESTARTED))
        changed = [self._queue(run, node, node.row.queued_at or now, effects)]
        if node.row.item is not None:
            self._item_moved(run, node, before, now, effects)  # its array's counts; saves it
        else:
            self._finish(run, changed, now, effects)
        return effects

    def _await_worker(self, run: LiveRun, node: LiveNode, effects: list[Effect]) -> bool:
        """At a restart: the node's call ran on a worker, so it may still; it stays
        running and waits for that worker (True). False: it ran in the engine's process."""
        place, call_id = node.row.place, node.row.call_id
        if place in (None, ENGINE_PLACE) or call_id is None:
            return False
        self._calls[call_id] = (run, node)
        queued_at = node.row.queued_at or node.row.started_at or 0.0
        gpu_ids = node.row.provenance.gpu_ids if node.row.provenance is not None else ()
        request = self._request(run, node, call_id, queued_at)
        effects.append(AwaitWorker(request, place, tuple(gpu_ids), node.row.holder))
        return True

    if TYPE_CHECKING:  # given by the class it is mixed into

        def ended(self, call_id: str, outcome: CallOutcome, now: float) -> list[Effect]:
            raise NotImplementedError
