"""The engine's one stream of events: each kind declared once here, emitted where it happens.

What happens in the engine is emitted as one of the typed events below, on the one
:class:`EngineStream` stream of the app:

- the dispatcher emits what happens to runs, calls, places and the views it answers;
- the worker registry and each worker's session what happens to attached workers;
- the provisioning driver what happens to machine requests and remote commands (its
  events are declared with it, in :mod:`fluksio.provisioners.events`);
- the worker-token routes what happens to tokens.

The live feed (:mod:`fluksio.engine.live`), the metrics (:mod:`fluksio.engine.metrics`), the
plugins' hooks (:mod:`fluksio.engine.provisioning`) and the registry's change count subscribe:
nothing else in the engine listens to anything. A subscriber is called synchronously, in
the order it subscribed, and must not raise.

What the feed sends a client for each is described in ``GET /api/v1/openapi.json`` (the
models of :mod:`fluksio.api.routes.events`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.runs.views import RunChange
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.provisioners.base import WorkerRecord
from fluksio.provisioners.events import (
    CommandRan,
    RequestAttached,
    RequestFailed,
    RequestSubmitted,
)

__all__ = [
    "VIEWS_CHANGED",
    "ArtifactBytes",
    "CallLogged",
    "CallProgressed",
    "CommandRan",
    "EngineEvent",
    "EngineStream",
    "RequestAttached",
    "RequestFailed",
    "RequestSubmitted",
    "RunsWritten",
    "TokenMinted",
    "TokenRevoked",
    "ViewsChanged",
    "WorkerChanged",
    "WorkerJoined",
    "WorkerLeft",
    "WorkerRefused",
]


@dataclass(frozen=True)
class RunsWritten:
    """Rows of runs and their nodes were written (a new run, a call queued, started or
    ended): as they now are in the store."""

    changes: Sequence[RunChange]


@dataclass(frozen=True)
class CallProgressed:
    """A running call reported an event (``fluksio.emit``); ``count`` so far."""

    run: RunRow
    node: NodeRow
    count: int


@dataclass(frozen=True)
class CallLogged:
    """A running call wrote lines (secrets blanked): ``lines`` from position ``first``."""

    run_id: str
    flow: str
    node_id: str
    call_id: str
    attempt: int
    first: int
    lines: list[str]
    item: int | None = None
    """An array's item: its position (``node_id`` names the array)."""


@dataclass(frozen=True)
class ViewsChanged:
    """What the dispatcher's read-only views answer may read differently now: the queue,
    a place's free amounts, how provisioning stands."""


@dataclass(frozen=True)
class WorkerChanged:
    """A worker attached, changed (its calls in flight, its free amounts, whether it
    answers) or went away: the dispatcher's word, once its place says so. ``gone`` is
    why it went (``None`` while attached, or when no reason is known)."""

    worker_id: str
    gone: str | None = None


@dataclass(frozen=True)
class WorkerJoined:
    """A worker can take calls: what ties it to a machine request, if anything does."""

    worker: WorkerRecord


@dataclass(frozen=True)
class WorkerLeft:
    worker: WorkerRecord


@dataclass(frozen=True)
class WorkerRefused:
    """A worker was refused for its protocol: it needs an upgrade."""

    entry: NeedsUpgrade


@dataclass(frozen=True)
class TokenMinted:
    """A worker token was minted: as ``GET /workers/tokens`` describes it, never its text."""

    token: dict[str, Any]


@dataclass(frozen=True)
class TokenRevoked:
    token: dict[str, Any]


@dataclass(frozen=True)
class ArtifactBytes:
    """Bytes of artifacts that went into the store (``in``) or out of it to a reader."""

    direction: Literal["in", "out"]
    size: int


EngineEvent = (
    RunsWritten
    | CallProgressed
    | CallLogged
    | ViewsChanged
    | WorkerChanged
    | WorkerJoined
    | WorkerLeft
    | WorkerRefused
    | TokenMinted
    | TokenRevoked
    | ArtifactBytes
    | RequestSubmitted
    | RequestFailed
    | RequestAttached
    | CommandRan
)
VIEWS_CHANGED = ViewsChanged()
"""The one instance: it carries nothing, and is emitted at every change of a view."""
E = TypeVar("E", bound=EngineEvent)


class EngineStream:
    """The stream: emit an event, and its kind's subscribers are told, in order.

    A subscriber names the kinds it wants, so that an event nobody reads costs one lookup.
    """

    def __init__(self) -> None:
        self._subscribers: dict[type, list[Callable[[Any], None]]] = {}

    def subscribe(self, kind: type[E], subscriber: Callable[[E], None]) -> None:
        self._subscribers.setdefault(kind, []).append(subscriber)

    def emit(self, event: EngineEvent) -> None:
        for subscriber in self._subscribers.get(type(event), ()):
            subscriber(event)
