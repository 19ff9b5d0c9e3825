"""Answers sent and not yet known to be recorded by the engine.

A path can drop with an answer written into it, and an engine can die between reading an
answer and writing it: the agent cannot tell. The engine reads a socket's frames in
order and answers a ping once what came before it is written, so a pong says every answer
sent before its ping is recorded. Until then an answer is kept; if the connection ends
first, it is named in the next hello and sent again after the welcome (to the engine
that had it already, as a call no longer in flight, dropped; to a restarted one, which
adopts the call, its outcome).
"""

from __future__ import annotations

from fluksio.agent.protocol.frames import AnswerFrame

__all__ = ["UNASKED_ANSWERS", "UNASKED_BYTES", "Unconfirmed"]

UNASKED_ANSWERS = 256
UNASKED_BYTES = 16 * 1024 * 1024
"""Answers (or bytes of them) sent since the last ping past which one goes at once: what
an agent keeps unconfirmed stays bounded between its regular pings."""


class Unconfirmed:
    def __init__(self) -> None:
        self._answers: dict[str, AnswerFrame] = {}
        self._pings: dict[bytes, list[str]] = {}
        self._next = 0
        self._unasked = (0, 0)
        """Answers sent since the last ping, and their bytes."""

    def sent(self, answer: AnswerFrame, size: int = 0) -> None:
        self._answers[answer.call_id] = answer
        count, held = self._unasked
        self._unasked = (count + 1, held + size)

    def due(self) -> bool:
        """Enough is kept unconfirmed that a ping should ask now, not at its interval."""
        count, held = self._unasked
        return count >= UNASKED_ANSWERS or held >= UNASKED_BYTES

    def ping(self) -> bytes:
        """The payload of a ping to send now: its pong confirms what was sent before it."""
        self._next += 1
        self._unasked = (0, 0)
        payload = str(self._next).encode()
        self._pings[payload] = list(self._answers)
        return payload

    def pong(self, payload: bytes) -> None:
        for call_id in self._pings.pop(payload, ()):
            self._answers.pop(call_id, None)

    def take(self) -> list[AnswerFrame]:
        """What is still unconfirmed, in the order it was sent; forgotten here."""
        answers = list(self._answers.values())
        self._answers.clear()
        self._pings.clear()
        return answers
