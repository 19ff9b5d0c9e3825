"""What the engine tells its live feed: runs, calls, workers, the queue and provisioning.

Everything comes from the engine's one stream (:mod:`fluksio.engine.stream`):

- **Runs and calls** as they are written; a running call's
  reported events (``fluksio.emit``) as a count, at most twice a second.
- **Workers** as the dispatcher says they changed (attached, a call placed or ended,
  silent or answering again, gone), a few milliseconds later (a second while nobody
  listens), so that a burst of changes to one worker (a pass placing several calls) is
  one event.
- **The queue and the provisioners** are views: each is published whole when it differs
  from the last one published, looked at after the dispatcher changed (at most four
  times a second while someone listens, once a second otherwise), and each second while
  calls wait, since their reasons count down.
"""

from __future__ import annotations

import collections
from typing import Any

from fluksio.clock import Clock, Timer
from fluksio.engine.feed import LiveFeed
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.stream import (
    CallLogged,
    CallProgressed,
    EngineStream,
    RunsWritten,
    TokenMinted,
    TokenRevoked,
    ViewsChanged,
    WorkerChanged,
    WorkerRefused,
)
from fluksio.engine.views import EngineViews, refused_body

__all__ = ["LiveEvents"]

LOG_LINES_PER_EVENT = 200
"""The most lines one ``call.log`` event carries (the newest, when more came)."""
LOG_BYTES_PER_EVENT = 32 << 10
"""... and the most text: a flood costs the feed this much per call every half second."""
WORKER_SETTLE_S = 0.01
PROGRESS_EVERY_S = 0.5
"""A call that reports events (``fluksio.emit``) is told at most this often."""
VIEWS_EVERY_S = 0.25
VIEWS_EVERY_UNWATCHED_S = 1.0
COUNTDOWN_EVERY_S = 1.0


class LiveEvents:
    def __init__(self, feed: LiveFeed, views: EngineViews, clock: Clock) -> None:
        self._feed = feed
        self._clock = clock
        self._engine_views = views
        self._dirty: set[str] = set()
        self._gone: dict[str, str | None] = {}
        """Why each worker among the changed ones went, when it went."""
        self._announced: dict[str, dict[str, Any]] = {}
        """Each worker the feed has shown, with the body it last showed."""
        self._workers_due: Timer | None = None
        self._bodies_due: Timer | None = None
        self._last_bodies: dict[str, Any] = {}
        self._progress: dict[str, tuple[RunRow, NodeRow, int]] = {}
        self._progress_due: Timer | None = None
        self._logged: dict[str, _Lines] = {}
        self._logged_due: Timer | None = None
        self._closed = False

    def connect(self, events: EngineStream) -> None:
        """Subscribe to the engine's stream."""
        events.subscribe(RunsWritten, self._runs_written)
        events.subscribe(CallProgressed, self._progressed)
        events.subscribe(CallLogged, self._call_logged)
        events.subscribe(WorkerChanged, self._worker_changed)
        events.subscribe(WorkerRefused, self._refused)
        events.subscribe(ViewsChanged, self._views_changed)
        events.subscribe(TokenMinted, self._token)
        events.subscribe(TokenRevoked, self._token)
        # What the views are now is what a subscriber fetches; only changes are news.
        self._last_bodies = self._view_bodies()

    def close(self) -> None:
        self._closed = True
        for handle in (self._workers_due, self._bodies_due, self._progress_due, self._logged_due):
            if handle is not None:
                handle.cancel()

    # -- runs and calls ----------------------------------------------------------------

    def _runs_written(self, event: RunsWritten) -> None:
        publish = self._feed.publish
        for change in event.changes:
            row = change.row
            for node in change.nodes:
                if node.item is not None:
                    continue  # an array's items are told as its counts, a second apart
                told: dict[str, Any] = {
                    "run_id": row.id,
                    "flow": row.flow,
                    "node": node.node_id,
                    "call_id": node.call_id,
                    "state": node.state.value,
                    "place": node.place,
                    "sent_ahead": node.sent_ahead,
                    "attempt": node.attempt,
                    "restores": node.checkpoint is not None,
                }
                if node.array is not None:
                    told["items"] = node.array.to_json()
                publish("call.state", told)
            if change.run_changed:
                publish("run.state", {"run_id": row.id, "flow": row.flow, "state": row.state.value})

    def _token(self, event: TokenMinted | TokenRevoked) -> None:
        kind = "token.minted" if isinstance(event, TokenMinted) else "token.revoked"
        self._feed.publish(kind, {"token": event.token})

    def _progressed(self, event: CallProgressed) -> None:
        node = event.node
        if node.call_id is None:
            return
        self._progress[node.call_id] = (event.run, node, event.count)
        if self._progress_due is None and not self._closed:
            self._progress_due = self._clock.call_later(PROGRESS_EVERY_S, self._publish_progress)

    def _publish_progress(self) -> None:
        self._progress_due = None
        progressed, self._progress = self._progress, {}
        for call_id, (run, node, count) in progressed.items():
            self._feed.publish(
                "call.progress",
                {
                    "run_id": run.id,
                    "flow": run.flow,
                    "node": node.node_id,
                    "call_id": call_id,
                    "events": count,
                },
            )

    def _call_logged(self, event: CallLogged) -> None:
        gathered = self._logged.get(event.call_id)
        if gathered is None:
            gathered = self._logged[event.call_id] = _Lines(event, event.first)
        gathered.add(event.first, event.lines)
        if self._logged_due is None and not self._closed:
            self._logged_due = self._clock.call_later(PROGRESS_EVERY_S, self._publish_logged)

    def _publish_logged(self) -> None:
        self._logged_due = None
        logged, self._logged = self._logged, {}
        for call_id, gathered in logged.items():
            head = gathered.event
            self._feed.publish(
                "call.log",
                {
                    "run_id": head.run_id,
                    "flow": head.flow,
                    "node": head.node_id,
                    "call_id": call_id,
                    "attempt": head.attempt,
                    **({"item": head.item} if head.item is not None else {}),
                    "first": gathered.first,
                    "lines": list(gathered.lines),
                    "missed": gathered.first - gathered.since,
                },
            )

    # -- workers -----------------------------------------------------------------------

    def _worker_changed(self, event: WorkerChanged) -> None:
        self._dirty.add(event.worker_id)
        if event.gone is not None:
            self._gone[event.worker_id] = event.gone
        self._workers_soon()

    def _workers_soon(self) -> None:
        if self._workers_due is None and not self._closed:
            # Nobody listening: a burst's changes to a worker become one event a second,
            # still there for a subscriber that comes back with its last id.
            settle = WORKER_SETTLE_S if self._feed.subscribers else VIEWS_EVERY_UNWATCHED_S
            self._workers_due = self._clock.call_later(settle, self._publish_workers)

    def _publish_workers(self) -> None:
        self._workers_due = None
        dirty, self._dirty = self._dirty, set()
        gone, self._gone = self._gone, {}
        for worker_id in dirty:
            worker = self._engine_views.worker(worker_id)
            if worker is not None:
                body = worker.model_dump(mode="json")
                shown = self._announced.get(worker_id)
                if shown != body:
                    kind = "worker.changed" if shown is not None else "worker.attached"
                    self._feed.publish(kind, {"worker": body})
                    self._announced[worker_id] = body
            elif not self._engine_views.is_attached(worker_id) and worker_id in self._announced:
                name = self._announced.pop(worker_id)["name"]
                reason = gone.get(worker_id)
                self._feed.publish("worker.gone", {"id": worker_id, "name": name, "reason": reason})

    def _refused(self, event: WorkerRefused) -> None:
        body = refused_body(event.entry).model_dump(mode="json")
        self._feed.publish("worker.refused", {"worker": body})

    # -- the queue and provisioning ------------------------------------------------------

    def _views_changed(self, _event: ViewsChanged | None = None) -> None:
        if self._bodies_due is None and not self._closed:
            every = VIEWS_EVERY_S if self._feed.subscribers else VIEWS_EVERY_UNWATCHED_S
            self._bodies_due = self._clock.call_later(every, self._publish_bodies)

    def _view_bodies(self) -> dict[str, Any]:
        return {
            "queue": {
                "queued": [body.model_dump(mode="json") for body in self._engine_views.waiting()]
            },
            "provisioning": {
                "provisioners": [
                    body.model_dump(mode="json") for body in self._engine_views.provisioners()
                ]
            },
        }

    def _publish_bodies(self) -> None:
        self._bodies_due = None
        if self._closed:
            return
        for kind, data in self._view_bodies().items():
            if self._last_bodies.get(kind) != data:
                self._feed.publish(kind, data, view=kind)
                self._last_bodies[kind] = data
        if self._engine_views.has_waiting():
            self._bodies_due = self._clock.call_later(COUNTDOWN_EVERY_S, self._publish_bodies)


class _Lines:
    """A call's lines since the last ``call.log`` event: the newest that fit in one."""

    def __init__(self, event: CallLogged, since: int) -> None:
        self.event = event
        self.since = since
        """The position the previous event left off at."""
        self.first = since
        self.lines: collections.deque[str] = collections.deque()
        self.bytes = 0

    def add(self, first: int, lines: list[str]) -> None:
        if first > self.first + len(self.lines):  # lines passed over before these
            self.lines.clear()
            self.bytes = 0
            self.first = first
        for line in lines:
            self.lines.append(line)
            self.bytes += len(line) + 1
        while self.lines and (
            len(self.lines) > LOG_LINES_PER_EVENT or self.bytes > LOG_BYTES_PER_EVENT
        ):
            self.bytes -= len(self.lines.popleft()) + 1
            self.first += 1
