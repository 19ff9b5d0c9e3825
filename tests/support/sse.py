"""A reader of the engine's event feed for tests: parses server-sent events as they come
(with the one parser the CLI uses too), and reads each event's data through the model
``GET /openapi.json`` declares for its kind: an event the declaration does not describe
fails the test that received it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from pydantic import ValidationError

from fluksio.client.sse import EventParser
from fluksio.client.sse import ReceivedEvent as Event
from fluksio.wire.answers.feed import FEED_EVENTS

__all__ = ["Event", "EventReader"]


class EventReader:
    """Reads one open ``GET /events`` response into :attr:`events`, in the background."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.events: list[Event] = []
        self.ended = False
        self.undeclared: list[str] = []
        """Events whose data their kind's declared model does not describe."""
        self._arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        parser = EventParser()
        try:
            async for line in self.response.content:
                event = parser.feed(line)
                if event is not None:
                    self._check(event)
                    self.events.append(event)
                    self._arrived.set()
        except (aiohttp.ClientError, asyncio.CancelledError):
            pass
        finally:
            self.ended = True
            self._arrived.set()

    def _check(self, event: Event) -> None:
        model = FEED_EVENTS.get(event.kind)
        if model is None:
            self.undeclared.append(f"{event.kind}: no model declared for this kind")
            return
        try:
            model.model_validate(event.data)
        except ValidationError as exc:
            self.undeclared.append(f"{event.kind}: {exc}")
        extra = set(event.data) - set(model.model_fields)
        if extra:
            self.undeclared.append(f"{event.kind}: fields not declared: {sorted(extra)}")

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    async def until(
        self, found: Callable[[list[Event]], bool], *, timeout: float = 10, what: str
    ) -> list[Event]:
        """Wait until ``found(events)`` holds; the events so far. Fails after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not found(self.events):
            left = deadline - loop.time()
            if left <= 0 or self.ended:
                raise AssertionError(f"no {what} within {timeout} s; got {self.kinds()}")
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                continue
        return self.events

    async def first(self, kind: str, *, where: Callable[[Any], bool] = lambda _d: True) -> Event:
        def match(events: list[Event]) -> bool:
            return any(e.kind == kind and where(e.data) for e in events)

        await self.until(match, what=f"{kind} event")
        assert not self.undeclared, self.undeclared
        return next(e for e in self.events if e.kind == kind and where(e.data))

    async def close(self) -> None:
        self.response.close()
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        assert not self.undeclared, self.undeclared
