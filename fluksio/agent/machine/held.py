"""What the agent keeps of its calls while the engine is away: their answers and events,
and the newest of their output lines, to send after the next welcome.

Lines are bounded (:data:`HELD_LINES_BYTES`; the oldest go first, a gap their readers
are told of): an answer carries its call's whole output anyway. Answers and events are
never let go: a long absence loses lines as they were written live, never an outcome.
"""

from __future__ import annotations

from collections.abc import Iterable

from fluksio.agent.protocol.frames import AnswerFrame, LogFrame, ProgressFrame

__all__ = ["HELD_LINES_BYTES", "CallFrame", "Held"]

HELD_LINES_BYTES = 4 * 1024 * 1024
"""Output lines held while the engine is away, at most: the newest are kept."""
CallFrame = ProgressFrame | LogFrame | AnswerFrame


class Held:
    def __init__(self) -> None:
        self.away = False
        """Calls are kept through a drop: the next hello names them."""
        self._frames: list[CallFrame] = []
        self._line_bytes = 0

    def __bool__(self) -> bool:
        return bool(self._frames)

    def begin(self, unconfirmed: list[AnswerFrame]) -> None:
        """The connection ended and its calls are kept: answers sent but not confirmed
        recorded go first."""
        self._frames[:0] = unconfirmed
        self.away = True

    def answers(self) -> int:
        return sum(isinstance(frame, AnswerFrame) for frame in self._frames)

    def names(self, running: Iterable[str]) -> list[str] | None:
        """What the hello names (``resume``): the calls running and those answered, while
        away; None when not."""
        if not self.away:
            return None
        answered = {f.call_id for f in self._frames if isinstance(f, AnswerFrame)}
        return sorted(set(running) | answered)

    def hold(self, frame: CallFrame) -> None:
        """Keep a frame for after the welcome (while away; heartbeats say nothing then)."""
        if not self.away or (isinstance(frame, ProgressFrame) and frame.event == "heartbeat"):
            return
        self._frames.append(frame)
        if isinstance(frame, LogFrame):
            self._line_bytes += _line_bytes(frame)
            if self._line_bytes > HELD_LINES_BYTES:
                self._let_oldest_lines_go()

    def take(self) -> list[CallFrame]:
        """Welcomed back: what was held, in order; no longer away."""
        frames, self._frames, self._line_bytes = self._frames, [], 0
        self.away = False
        return frames

    def _let_oldest_lines_go(self) -> None:
        """Down to half the bound, so that this happens once per half of it."""
        kept: list[CallFrame] = []
        for frame in self._frames:
            if isinstance(frame, LogFrame) and self._line_bytes > HELD_LINES_BYTES // 2:
                self._line_bytes -= _line_bytes(frame)
                continue
            kept.append(frame)
        self._frames = kept


def _line_bytes(frame: LogFrame) -> int:
    return sum(len(line) for line in frame.lines)
