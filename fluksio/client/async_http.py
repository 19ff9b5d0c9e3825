"""The engine's API over HTTP for an event loop (aiohttp): :class:`AsyncHttp` is to
:class:`~fluksio.client.async_client.AsyncClient` what :class:`~fluksio.client.http.Http`
is to the blocking client: bytes in, bytes out, one error per failure, every answer
bounded in size and time and no redirect followed (:mod:`fluksio.client.bounds`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
from aiohttp.http_exceptions import LineTooLong

from fluksio.client.bounds import EVENT_BYTES, redirected
from fluksio.client.endpoint import Endpoint
from fluksio.client.errors import ClientError, EngineRefused, Unreachable, refusal
from fluksio.client.http import FEED_SILENCE_S, TIMEOUT_S
from fluksio.client.sse import EventParser, ReceivedEvent

__all__ = ["AsyncHttp"]


class AsyncHttp(Endpoint):
    """Requests to the API at ``base_url`` with a bearer token, on one connection pool
    (opened at the first request, in the loop that makes it; :meth:`close` ends it)."""

    _session: aiohttp.ClientSession | None = None
    """Opened at the first request, in the loop that makes it."""

    async def send(
        self,
        method: str,
        path: str,
        data: bytes | None = None,
        content_type: str | None = None,
        *,
        large: bool = False,
    ) -> bytes:
        """The raw answer's bytes; :class:`EngineRefused` for a 4xx or 5xx. ``large``: an
        artifact's bytes, bounded as those are."""
        headers = self.bearer()
        if content_type:
            headers["Content-Type"] = content_type
        started = asyncio.get_running_loop().time()
        sent = len(data) if data else 0
        reading = self.bounds.reading(f"{method} {path}", started, sent=sent, large=large)
        try:
            async with asyncio.timeout_at(reading.deadline) as deadline:
                with _failing_as(f"cannot reach the engine at {self.base_url}"):
                    async with self._answer(method, path, headers, TIMEOUT_S, data) as answer:
                        reading.declared(answer.content_length)
                        async for piece in answer.content.iter_any():
                            reading.add(piece)
                            deadline.reschedule(reading.deadline)
        except TimeoutError:
            raise reading.too_slow() from None
        body = reading.body()
        if answer.status >= 400:
            raise refusal(answer.status, body)
        return body

    async def events(
        self, path: str, last_id: str | None = None, stop: Callable[[], bool] | None = None
    ) -> AsyncIterator[ReceivedEvent]:
        """Server-sent events from ``path`` as they come, until the engine ends them or
        ``stop()`` is true (asked at each line); a feed gone quiet is :class:`ClientError`."""
        headers = self.bearer()
        headers["Accept"] = "text/event-stream"
        if last_id:
            headers["Last-Event-ID"] = last_id
        with _failing_as(f"the live feed from {self.base_url} broke off"):
            async with self._answer("GET", path, headers, FEED_SILENCE_S) as answer:
                if answer.status >= 400:
                    raise refusal(answer.status, await answer.content.read(EVENT_BYTES))
                parser = EventParser(self.bounds.parsed_bytes)
                async for line in _lines(answer.content):
                    if stop is not None and stop():
                        return
                    event = parser.feed(line)
                    if event is not None:
                        yield event

    @contextlib.asynccontextmanager
    async def _answer(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        silence_s: float,
        data: bytes | None = None,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The engine's answer, its body unread (a read silent for ``silence_s`` fails);
        a redirect is refused, never followed."""
        async with self._pool().request(
            method,
            self.base_url + path,
            data=data,
            headers=headers,
            ssl=self.tls or True,  # True: the system's CAs
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=silence_s),
        ) as answer:
            if 300 <= answer.status < 400:
                where = answer.headers.get("Location")
                raise redirected(f"{method} {path}", answer.status, where)
            yield answer

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _pool(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """The stream's lines, each at most :data:`EVENT_BYTES` (a longer one is given up
    before it is held whole)."""
    while True:
        try:
            line = await stream.readuntil(b"\n", max_size=EVENT_BYTES)
        except LineTooLong:
            raise ClientError(
                f"a line of the live feed is over {EVENT_BYTES} bytes, more than any event"
                " the engine sends; given up"
            ) from None
        if not line:
            return
        yield line


@contextlib.contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """A connection that fails as :class:`Unreachable` saying ``what`` and why."""
    try:
        yield
    except EngineRefused:
        raise
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        refused = isinstance(exc, aiohttp.ClientConnectorError) and isinstance(
            exc.os_error, ConnectionRefusedError
        )
        raise Unreachable(f"{what}: {exc or type(exc).__name__}", unsent=refused) from None
