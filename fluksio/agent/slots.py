"""The agent's slots (``--parallel``): calls taken ahead of a free one wait here, in the
order they came, and start as slots free; one cancelled while it waits never starts."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Slots"]


class Slots:
    """``parallel`` slots; :meth:`take` waits for one, first come first served."""

    def __init__(self, parallel: int) -> None:
        self._free = parallel
        self._waiting: dict[str, asyncio.Future[bool]] = {}
        """The calls waiting for a slot, oldest first (a dict keeps its order)."""

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def full(self) -> bool:
        """A call taken now would wait."""
        return self._free == 0 or bool(self._waiting)

    async def take(self, call_id: str) -> bool:
        """A slot for ``call_id``: True once it has one (give it back with :meth:`give_back`),
        False if it was dropped while it waited (it must not start)."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return True
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[call_id] = turn
        try:
            return await turn
        except asyncio.CancelledError:
            # Handed a slot as it was cancelled: the slot goes on to the next in line.
            if turn.done() and not turn.cancelled() and turn.result():
                self.give_back()
            raise
        finally:
            if self._waiting.get(call_id) is turn:
                del self._waiting[call_id]

    def give_back(self) -> None:
        """A call ended: its slot goes to the oldest waiting call, else it is free."""
        while self._waiting:
            call_id = next(iter(self._waiting))
            turn = self._waiting.pop(call_id)
            if not turn.done():
                turn.set_result(True)
                return
        self._free += 1

    def drop(self, call_id: str) -> bool:
        """Drop a waiting call (cancelled, or its connection gone): it never starts.
        False if it was not waiting."""
        turn = self._waiting.pop(call_id, None)
        if turn is None:
            return False
        with contextlib.suppress(asyncio.InvalidStateError):
            turn.set_result(False)
        return True

    def drop_all(self) -> None:
        for call_id in list(self._waiting):
            self.drop(call_id)
