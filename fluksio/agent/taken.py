"""When a call the engine sent ahead of a free slot says it is taken.

The engine gives a call back to its queue when it hears nothing at all from the worker
for ``take_s`` after sending it: the worker froze before it could take it. Any frame
says the worker did not freeze. A call that starts at once says so in its ``started``;
in a busy worker another call's frame soon goes out and says it too. So the ``taken``
word waits a share of ``take_s`` and is sent only if no other frame went out meanwhile:
in a fan-out that is one frame a call fewer, each way through both processes. An engine
that does not tell ``take_s`` (an older one) hears the word at once, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from fluksio.agent.clock import Clock

__all__ = ["TAKEN_WORD_SHARE", "TakenWords"]

TAKEN_WORD_SHARE = 0.25
"""The share of the engine's ``take_s`` a word waits for another frame to say it first:
the rest is left for it to arrive."""


class TakenWords:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.take_s: float | None = None
        """The engine's take rule, as its welcome told it; None: say each word at once."""
        self.said = 0
        """Frames sent so far, on every connection."""
        self._sending: set[asyncio.Task[None]] = set()

    async def say(
        self, send: Callable[[], Coroutine[Any, Any, None]], waiting: Callable[[], bool]
    ) -> None:
        """``send`` the word now, or later unless another frame was sent first or the call
        no longer ``waiting`` (it started, ended or was dropped: its own frames said it)."""
        if self.take_s is None:
            await send()
            return
        said = self.said

        def unless_said() -> None:
            if self.said == said and waiting():
                sending = asyncio.get_running_loop().create_task(send())
                self._sending.add(sending)
                sending.add_done_callback(self._sending.discard)

        self._clock.call_later(self.take_s * TAKEN_WORD_SHARE, unless_said)
