"""What each event of the live feed (``GET /events``) carries: one model per kind.

The feed (:mod:`fluksio.engine.live`) builds each event's ``data`` to these models, and
``GET /api/v1/openapi.json`` describes them (under the feed's operation, as
``x-events``: kind -> schema). The tests read every event they receive through them.
"""

from __future__ import annotations

from pydantic import BaseModel

from fluksio.wire.answers.base import Answer
from fluksio.wire.answers.tokens import WorkerTokenBody
from fluksio.wire.answers.workers import ProvisionerBody, RefusedWorkerBody, WaitingBody, WorkerBody
from fluksio.wire.states import NodeState, RunState

__all__ = ["FEED_EVENTS"]


class RunStateData(Answer):
    """A run was created or changed state."""

    run_id: str
    flow: str
    state: RunState


class CallStateData(Answer):
    """A node's call was queued, started or ended (or its node was skipped, cancelled)."""

    run_id: str
    flow: str
    node: str
    call_id: str | None
    state: NodeState
    place: str | None
    """Where it runs or ran: ``engine`` or a worker's name."""
    sent_ahead: bool = False
    """Running, but held by its worker ahead of a free slot: a later ``call.state``, with
    this false, says it started."""
    attempt: int = 1
    """Which attempt of its node this is: one more at each retry, and at each stop by its
    job's end or checkpoint (those spend no retry)."""
    restores: bool = False
    """An earlier attempt saved its state (``fluksio.checkpoint``): this one is given it
    back (``fluksio.restored()``)."""


class CallProgressData(Answer):
    """A running call reported events (``fluksio.emit``): told at most twice a second."""

    run_id: str
    flow: str
    node: str
    call_id: str
    events: int
    """How many it reported so far."""


class CallLogData(Answer):
    """Lines a running call wrote (secrets blanked): told at most twice a second per call,
    at most :data:`~fluksio.engine.live.LOG_LINES_PER_EVENT` lines each; the rest is
    ``missed``, to be read with ``GET /runs/{id}/logs`` from ``first``."""

    run_id: str
    flow: str
    node: str
    call_id: str
    attempt: int
    first: int
    """The position of ``lines[0]`` in the attempt's output."""
    lines: list[str]
    missed: int
    """Lines written before ``first`` since the last event that this one leaves out."""


class WorkerData(Answer):
    """A worker attached (``worker.attached``) or changed (``worker.changed``)."""

    worker: WorkerBody


class WorkerGoneData(Answer):
    id: str
    name: str
    reason: str | None


class WorkerRefusedData(Answer):
    """A worker was refused for its protocol: it needs an upgrade."""

    worker: RefusedWorkerBody


class QueueData(Answer):
    """The whole queue, when it reads differently (reasons count down each second)."""

    queued: list[WaitingBody]


class ProvisioningData(Answer):
    """How every provisioner's profiles stand, when that reads differently."""

    provisioners: list[ProvisionerBody]


class TokenData(Answer):
    """A worker token minted (``token.minted``) or revoked (``token.revoked``): never its
    text."""

    token: WorkerTokenBody


class ReadyData(Answer):
    """The stream is open; events after ``last_id`` follow."""

    last_id: str


class ReasonData(Answer):
    """``refetch``: fetch the views again, then read on; ``closed``: the stream ends."""

    reason: str


FEED_EVENTS: dict[str, type[BaseModel]] = {
    "ready": ReadyData,
    "refetch": ReasonData,
    "closed": ReasonData,
    "run.state": RunStateData,
    "call.state": CallStateData,
    "call.progress": CallProgressData,
    "call.log": CallLogData,
    "worker.attached": WorkerData,
    "worker.changed": WorkerData,
    "worker.gone": WorkerGoneData,
    "worker.refused": WorkerRefusedData,
    "queue": QueueData,
    "provisioning": ProvisioningData,
    "token.minted": TokenData,
    "token.revoked": TokenData,
}
"""Each kind of event the feed sends, and the model of its ``data``."""
