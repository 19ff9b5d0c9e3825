"""Answers sent through a relay and not yet known to have reached the engine.

A relay's path can drop with an answer written into it: the agent cannot tell whether it
arrived. The engine reads a socket's frames in order and answers a ping after the frames
before it, so a pong says every answer sent before its ping was read. Until then an
answer is kept; if the path drops first, it is sent again after the next welcome (an
engine that had it already drops the second copy as a call no longer in flight).
"""

from __future__ import annotations

from fluksio.agent.frames import AnswerFrame

__all__ = ["Unconfirmed"]


class Unconfirmed:
    def __init__(self) -> None:
        self._answers: dict[str, AnswerFrame] = {}
        self._pings: dict[bytes, list[str]] = {}
        self._next = 0

    def sent(self, answer: AnswerFrame) -> None:
        self._answers[answer.call_id] = answer

    def ping(self) -> bytes:
        """The payload of a ping to send now: its pong confirms what was sent before it."""
        self._next += 1
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
