"""Who is attached: one live session per identity, and who was refused for a protocol.

Identity: a worker is the pair (the token's ``jti``, the hello's ``name``). One token used
on two hosts (two ``--name`` values) gives two workers; a second attach with the same
token and name supersedes the first. A worker is shown as the token's signed name, with
the host's ``--name`` after a slash when it differs, so no token can show up under a name
another token signs.
"""

from __future__ import annotations

from fluksio.engine.stream import EngineStream, WorkerChanged, WorkerRefused
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.engine.workers.session import WorkerSession
from fluksio.engine.workers.socket import FrameCounts

__all__ = ["NeedsUpgrade", "WorkerRegistry", "display_name"]


def display_name(token_name: str, hello_name: str) -> str:
    return token_name if hello_name == token_name else f"{token_name}/{hello_name}"


REFUSED_PER_TOKEN = 8
"""Workers remembered as needing an upgrade per token: the most recently refused."""


class WorkerRegistry:
    def __init__(self, events: EngineStream) -> None:
        self._events = events
        self._by_id: dict[str, WorkerSession] = {}
        self._by_identity: dict[tuple[str, str], WorkerSession] = {}
        self._needs_upgrade: dict[str, NeedsUpgrade] = {}
        self.version = 0
        """Counts the changes to who is attached or refused and to what each one's body
        shows (the stream's ``WorkerChanged``: its calls in flight, free amounts and
        standing); a heartbeat alone (``last_seen``) is not one."""
        self.frames = FrameCounts()
        """WebSocket frames to and from every worker, since the engine started."""
        events.subscribe(WorkerChanged, self._count)
        events.subscribe(WorkerRefused, self._count)

    def _count(self, _event: WorkerChanged | WorkerRefused) -> None:
        self.version += 1

    def add(self, session: WorkerSession) -> WorkerSession | None:
        """Register ``session``; returns the session it supersedes, if any."""
        previous = self._by_identity.get(session.identity)
        if previous is not None:
            self._by_id.pop(previous.id, None)
        self._by_identity[session.identity] = session
        self._by_id[session.id] = session
        self._needs_upgrade.pop(session.name, None)
        self.version += 1
        return previous

    def remove(self, session: WorkerSession) -> bool:
        """Forget ``session`` unless another one has taken its identity since."""
        if self._by_identity.get(session.identity) is not session:
            return False
        del self._by_identity[session.identity]
        self._by_id.pop(session.id, None)
        self.version += 1
        return True

    def by_identity(self, identity: tuple[str, str]) -> WorkerSession | None:
        """The session of the worker (token ``jti``, hello ``name``), if attached or away."""
        return self._by_identity.get(identity)

    def get(self, worker_id: str) -> WorkerSession | None:
        return self._by_id.get(worker_id)

    def sessions(self) -> list[WorkerSession]:
        return sorted(self._by_id.values(), key=lambda s: (s.name, s.id))

    def attached(self) -> list[WorkerSession]:
        """Every session, in no particular order: for a look at each, without a sort."""
        return list(self._by_id.values())

    def with_jti(self, jti: str) -> list[WorkerSession]:
        return [s for s in self._by_id.values() if s.token.jti == jti]

    def refused_for_protocol(self, entry: NeedsUpgrade) -> None:
        self._needs_upgrade.pop(entry.name, None)
        self._needs_upgrade[entry.name] = entry
        same_token = [e for e in self._needs_upgrade.values() if e.jti == entry.jti]
        for oldest in same_token[: max(0, len(same_token) - REFUSED_PER_TOKEN)]:
            del self._needs_upgrade[oldest.name]  # insertion order: the oldest first
        self._events.emit(WorkerRefused(entry))

    def needs_upgrade(self) -> list[NeedsUpgrade]:
        return sorted(self._needs_upgrade.values(), key=lambda e: e.name)
