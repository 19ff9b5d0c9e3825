"""What each call uploaded with its own credential (:mod:`~fluksio.engine.call_tokens`).

A call's checkpoint names its state by digest; the engine gives that state to the call's
next attempt, wherever it runs. So a checkpoint counts only when the call itself uploaded
those bytes: naming another run's artifact, or a digest never uploaded, would hand one
run's private data to another. Rows are kept for :data:`KEPT_S` (a call's credential
lasts a day), so an answer that reaches the engine after a restart is still checked.
"""

from __future__ import annotations

from fluksio.agent.protocol.frames import ArtifactRef
from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine.database import Database

__all__ = ["KEPT_S", "CallSaves"]

KEPT_S = 3 * 24 * 3600.0
_SWEEP_EVERY_S = 3600.0


class CallSaves:
    def __init__(self, database: Database, clock: Clock = SYSTEM_CLOCK) -> None:
        self._db = database
        self._clock = clock
        self._swept_at = float("-inf")

    def add(self, call_id: str, digest: str, size: int) -> None:
        """Call ``call_id`` uploaded ``digest`` (``size`` bytes) with its own credential."""
        now = self._clock.now()
        self._db.execute(
            "INSERT INTO call_saves (call_id, digest, size, saved_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (call_id, digest) DO UPDATE SET size = excluded.size,"
            " saved_at = excluded.saved_at",
            (call_id, digest, size, now),
        )
        if now - self._swept_at > _SWEEP_EVERY_S:
            self._swept_at = now
            self._db.execute("DELETE FROM call_saves WHERE saved_at < ?", (now - KEPT_S,))

    def refusal(self, call_id: str, state: ArtifactRef) -> str | None:
        """Why call ``call_id`` may not name ``state`` as its checkpoint; None: it may."""
        digest = state.digest
        row = self._db.execute(
            "SELECT size FROM call_saves WHERE call_id = ? AND digest = ?", (call_id, digest)
        ).fetchone()
        if row is None:
            return (
                f"its state {digest} was not uploaded by this call (a checkpoint names"
                " only what fluksio.checkpoint saved with the call's own credential)"
            )
        if row["size"] != state.size:
            return f"its state {digest} is {row['size']} bytes, not the {state.size} named"
        return None
