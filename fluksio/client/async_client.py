"""``AsyncClient``: the engine's API from an event loop (a web service, a notebook's
``await``, an asyncio pipeline), the twin of :class:`~fluksio.client.client.Client`.

The same methods with the same answers, awaited: both are made of the same
:class:`~fluksio.client.operations.Operations`. Use it as ``async with``, or ``await
client.close()``, so its connections end with it. What it has not: the executor (a
``concurrent.futures.Executor`` is for threads; ``asyncio.wrap_future`` awaits its
futures).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel

from fluksio.client.absence import RIDE_OVER_S, Absence, FeedPosition, ride_over_from_environment
from fluksio.client.async_http import AsyncHttp
from fluksio.client.bounds import Bounds
from fluksio.client.endpoint import Front
from fluksio.client.errors import ClientError, EngineRefused, Redirected
from fluksio.client.operations import (
    Operations,
    api_url,
    credentials,
    login_form,
    run_end,
)
from fluksio.client.request import Awaited, Request, Steps, json_request
from fluksio.client.sse import ReceivedEvent
from fluksio.wire.answers.runs import RunBody

__all__ = ["AsyncClient"]

Answer = TypeVar("Answer")
Model = TypeVar("Model", bound=BaseModel)


class AsyncClient(Front[AsyncHttp], Operations, Awaited):
    """The API of the engine at ``url``, awaited; ``token``, ``ca_file``, ``bounds`` and
    ``ride_over_s`` as :class:`~fluksio.client.client.Client` takes them."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        bounds: Bounds | None = None,
        ride_over_s: float = RIDE_OVER_S,
    ):
        urls = [url] if isinstance(url, str) else url
        super().__init__(AsyncHttp([api_url(u) for u in urls], token, ca_file, bounds), ride_over_s)

    @classmethod
    async def from_environment(
        cls, url: str | Sequence[str], *, ca_file: str | None = None
    ) -> AsyncClient:
        """A client with ``$FLUKSIO_TOKEN``, or logged in as ``$FLUKSIO_USERNAME`` with
        ``$FLUKSIO_PASSWORD``."""
        name_or_token, password = credentials()
        ride_over_s = ride_over_from_environment()
        if password is None:
            return cls(url, token=name_or_token, ca_file=ca_file, ride_over_s=ride_over_s)
        client = cls(url, ca_file=ca_file, ride_over_s=ride_over_s)
        await client.login(name_or_token, password)
        return client

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """End the client's connections."""
        await self.http.close()

    async def send(self, request: Request[Answer]) -> Answer:
        """``request`` sent, and its answer read; of several engines, to the next while
        one is a standby or refuses the connection."""
        for tried in itertools.count():
            try:
                raw = await self.http.send(*request.line, large=request.large)
            except ClientError as failed:
                self.http.switch_after(failed, tried)  # or raises it
            else:
                return request.decode(raw)
        raise AssertionError("unreachable: a try returns or raises")

    async def drive(self, steps: Steps[Answer], *, riding: bool = False) -> Answer:
        """An operation of several requests, each sent in turn; ``riding``: each asked
        again while the engine is away, for up to ``ride_over_s``."""
        try:
            request = next(steps)
            while True:
                if riding:
                    request = steps.send(await self.riding(functools.partial(self.send, request)))
                else:
                    request = steps.send(await self.send(request))
        except StopIteration as done:
            answer: Answer = done.value
            return answer

    async def riding(self, read: Callable[[], Awaitable[Answer]]) -> Answer:
        """``await read()``, asked again while the engine cannot be reached, as
        :meth:`Client.riding <fluksio.client.client.Client.riding>` does it."""
        return await self._asked_again(read, unsent_only=False)

    async def unsent_again(self, change: Callable[[], Awaitable[Answer]]) -> Answer:
        """``await change()``, sent again while the engine refuses connections, as
        :meth:`Client.unsent_again <fluksio.client.client.Client.unsent_again>` does it."""
        return await self._asked_again(change, unsent_only=True)

    async def _asked_again(
        self, ask: Callable[[], Awaitable[Answer]], *, unsent_only: bool
    ) -> Answer:
        absence = Absence(self.ride_over_s)
        while True:
            try:
                return await ask()
            except ClientError as lost:
                pause = absence.lost(lost, time.monotonic(), unsent_only=unsent_only)
                await asyncio.sleep(pause)

    async def login(self, username: str, password: str) -> None:
        """Log in: the client holds the access token the engine gives."""
        self.http.token = await self.send(login_form(username, password))

    async def read(
        self, model: type[Model], method: str, path: str, body: object | None = None, **query: Any
    ) -> Model:
        """The engine's answer to ``method path`` as ``model`` (for what has no method)."""
        answer: Model = await self.send(json_request(model, method, path, body, **query))
        return answer

    async def wait_run(self, run_id: str, timeout: float | None = None) -> RunBody:
        """The run once it has ended, or as it stands after ``timeout`` seconds; over an
        engine's restart, for up to ``ride_over_s``."""
        return await self.drive(run_end(run_id, timeout), riding=True)

    async def events(
        self,
        *,
        run: str | None = None,
        last_id: str | None = None,
        reconnects: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> AsyncGenerator[ReceivedEvent, None]:
        """The live feed, resumed from the last event seen as
        :meth:`Client.events <fluksio.client.client.Client.events>` does it; ``async
        for`` over it, and leave the loop (or cancel the task) to end it."""
        position = FeedPosition(run, last_id, reconnects, Absence(self.ride_over_s))
        while stop is None or not stop():
            try:
                async for event in self.http.events(position.path, position.last_id, stop):
                    position.seen(event)
                    yield event
                ended = ClientError("the engine closed the live feed")
            except (EngineRefused, Redirected):
                raise  # opening it again would be refused (or redirected) again
            except ClientError as gone:
                ended = gone
            if stop is not None and stop():
                return
            await asyncio.sleep(position.dropped(ended, time.monotonic()))
