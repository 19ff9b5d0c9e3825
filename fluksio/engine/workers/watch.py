"""A periodic look at every attached worker: silent ones are gone, revoked ones are cut off.

Silence is the one liveness rule (the spec's 90 seconds, ``worker_gone_s``): the engine
pings every ``worker_ping_s`` and a healthy worker's pong, heartbeat or any other frame
counts as contact; nothing else closes a connected worker for being quiet.

A worker whose batch job ends within ``walltime_margin_s`` is drained: once idle it is
closed with 4010, and our agent then exits, ending its job before the walltime does.

Revocation through the API disconnects at once; this loop also catches what changes
behind the engine's back (``fluksio keys rotate`` from another process, a token expiring)
within ``worker_check_s``.
"""

from __future__ import annotations

from typing import Protocol

from fluksio.clock import Clock
from fluksio.engine.settings import EngineSettings
from fluksio.engine.tokens import TokenService
from fluksio.engine.worker_tokens import WorkerTokenStore
from fluksio.engine.workers.protocol import CLOSE_DRAINED
from fluksio.engine.workers.registry import WorkerRegistry

__all__ = ["Standing", "check_once", "ping_every_s", "watch_workers"]


class Standing(Protocol):
    """What the dispatcher knows of each worker that the watcher needs."""

    def calls_on(self, worker_id: str) -> int:
        """The calls placed on the worker and not yet ended (the one count of them)."""
        ...


def ping_every_s(settings: EngineSettings) -> float:
    """How often the engine pings each worker: several pings fit in the silence allowed."""
    return min(settings.worker_ping_s, settings.worker_gone_s / 6)


async def check_once(
    registry: WorkerRegistry,
    tokens: TokenService,
    store: WorkerTokenStore,
    settings: EngineSettings,
    standing: Standing,
    *,
    now: float,
) -> None:
    """Close the sessions that must end; each session's machine says whether its worker
    answers (the scheduler gives a silent worker nothing new) and keeps the 90-second rule."""
    key_id = tokens.current_key_id()
    sessions = registry.attached()
    unusable = store.unusable({session.token.jti for session in sessions})
    for session in sessions:
        busy = standing.calls_on(session.id) > 0
        await session.check(now, busy=busy)
        if session.machine.closed_reason is not None:
            continue  # the 90-second rule ended it
        reason = None
        if session.key_id != key_id:
            reason = "the engine's signing key was replaced; mint a new worker token"
        elif session.token.expires_at <= now:
            reason = "the worker token expired; mint a new one"
        elif session.token.jti in unusable:
            reason = "the worker token was revoked"
        if reason is not None:
            await session.close(reason)
            continue
        ends_at = session.hello.ends_at
        if ends_at is not None and not busy:
            left = ends_at - now
            if left < settings.walltime_margin_s:
                # Nothing can be placed there any more (no limit fits): let it go now, so
                # its job ends by itself rather than at its limit.
                drained = f"drained: its job ends in {max(0.0, left):.0f} s"
                await session.close(drained, code=CLOSE_DRAINED)


async def watch_workers(
    registry: WorkerRegistry,
    tokens: TokenService,
    store: WorkerTokenStore,
    settings: EngineSettings,
    standing: Standing,
    *,
    clock: Clock,
) -> None:
    while True:
        await clock.sleep(settings.worker_check_s)
        await check_once(registry, tokens, store, settings, standing, now=clock.now())
