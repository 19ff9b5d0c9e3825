"""The dispatcher's events from attached workers: one attached, went, stopped or resumed
answering, reported its artifact cache.

A part of :class:`~fluksio.engine.dispatch.dispatcher.Dispatcher`, given its
:class:`~fluksio.engine.dispatch.state.DispatchState` and the dispatcher as its
:class:`~fluksio.engine.dispatch.state.Hub`.
"""

from __future__ import annotations

from fluksio.engine.dispatch.state import DispatchState, Hub
from fluksio.engine.runs.views import Executor
from fluksio.engine.stream import WorkerChanged, WorkerJoined, WorkerLeft
from fluksio.logs import get_logger
from fluksio.provisioners.base import WorkerRecord
from fluksio.scheduler import Worker

__all__ = ["WorkerEvents"]

log = get_logger("fluksio.engine.dispatch.dispatcher")


class WorkerEvents:
    """Workers attached, gone, caching, stopping, answering or not."""

    def __init__(self, state: DispatchState, hub: Hub) -> None:
        self._state = state
        self._hub = hub

    def worker_attached(self, worker: Worker, executor: Executor, event: WorkerRecord) -> None:
        """A worker attached: it can take calls from the next pass on."""
        self._hub.changed()
        self._state.executors[worker.id] = executor
        self._state.scheduler.add_worker(worker)
        self._hub.place_changed(worker.id)
        if self._state.provisioning is not None:
            self._state.provisioning.worker_attached(event)
        self._state.stream.emit(WorkerJoined(event))
        self._hub.kick()

    def worker_gone(self, event: WorkerRecord, reason: str | None = None) -> None:
        """A worker is gone (``reason``, when known); its executor has already failed its
        calls in flight."""
        self._hub.changed()
        self._state.executors.pop(event.worker_id, None)
        if self._state.scheduler.has_place(event.worker_id):
            self._state.scheduler.remove_worker(event.worker_id)
        self._state.stream.emit(WorkerChanged(event.worker_id, gone=reason))
        if self._state.provisioning is not None:
            self._state.provisioning.worker_gone(event)
        self._state.stream.emit(WorkerLeft(event))
        self._hub.kick()

    def set_cached(
        self, worker_id: str, digests: frozenset[str], images: frozenset[str] = frozenset()
    ) -> None:
        """A worker reported what its artifact cache holds, and the images it holds ready:
        calls reading those inputs, or in those images, prefer it among the places that
        fit."""
        if self._state.scheduler.has_place(worker_id):
            self._hub.changed()
            self._state.scheduler.set_cached(worker_id, digests, images)
            self._hub.place_changed(worker_id)  # its view shows how many it holds
            self._hub.kick()

    def saved_by(self, call_id: str, digest: str) -> None:
        """Call ``call_id`` saved ``digest`` (with its own credential): the worker it runs
        on holds it now (the agent keeps what it saves in its cache), so the next call
        reading it prefers that worker, before the worker's next report says so."""
        place_id = self._state.scheduler.saved_by(call_id, digest)
        if place_id is not None:
            self._hub.changed()
            self._hub.place_changed(place_id)
            self._hub.kick()

    def set_stopping(self, worker_id: str) -> bool:
        """A worker is stopping (told to stop): nothing new goes to it again, so a call
        its stop ended or refused goes elsewhere instead of back to it. False: it was
        known to be stopping already, or is not attached."""
        place = self._state.scheduler.view(worker_id)
        if place is None or place.stopping:
            return False
        self._hub.changed()
        self._state.scheduler.set_stopping(worker_id)
        self._hub.place_changed(worker_id)
        self._hub.kick()
        return True

    def set_answering(self, worker_id: str, answering: bool) -> None:
        """A worker stopped answering (nothing new for it) or answers again."""
        if self._state.scheduler.has_place(worker_id):
            self._hub.changed()
            self._state.scheduler.set_paused(worker_id, not answering)
            self._hub.place_changed(worker_id)
            log.info("worker.answering" if answering else "worker.silent", worker_id=worker_id)
            self._hub.kick()
