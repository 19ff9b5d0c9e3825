"""The engine's API over HTTP, untyped: one request, one answer, one error per failure.

The standard library only (no event loop): the command line starts in tens of
milliseconds on it, and a script or a notebook needs nothing running. Each thread keeps
its connection open between requests; the live feed has one of its own. TLS is verified
against the system's CAs, or a CA file given. Every answer is bounded in size and time,
and no redirect is followed (:mod:`fluksio.client.bounds`).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from fluksio.client.bounds import (
    EVENT_BYTES,
    Bounds,
    Reading,
    Watch,
    Watchdog,
    redirected,
    shut,
)
from fluksio.client.endpoint import Endpoint
from fluksio.client.errors import ClientError, EngineRefused, Unreachable, refusal
from fluksio.client.sse import EventParser, ReceivedEvent

__all__ = ["Http"]

TIMEOUT_S = Bounds.within_s
"""Above the longest server-side wait a request may ask for (``?wait=60``)."""
_CHUNK = 1 << 16
_WATCHDOG = Watchdog()
FEED_SILENCE_S = 45.0
"""Three of the live feed's keepalive comments: a read waiting longer means it is gone."""


class Http(Endpoint):
    """Requests to the API at ``base_url`` (``https://host/api/v1``) with a bearer token."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        token: str | None = None,
        ca_file: str | None = None,
        bounds: Bounds | None = None,
    ):
        super().__init__(base_url, token, ca_file, bounds)
        self._kept = threading.local()
        """Each thread's connection, kept open between requests (a new one costs a
        handshake, and with TLS several)."""

    def send(
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
        where = urllib.parse.urlsplit(self.base_url)
        target = where.path + path
        sent = len(data) if data else 0
        with _failing_as(f"cannot reach the engine at {self.base_url}"):
            for fresh in (False, True):
                connection, reused = self._connection(where)
                reading = self.bounds.reading(
                    f"{method} {path}", time.monotonic(), sent=sent, large=large
                )
                began: list[socket.socket] = []
                cut = functools.partial(_cut, connection, began)
                with _WATCHDOG.watch(reading, cut) as watch:
                    try:
                        connection.request(method, target, body=data, headers=headers)
                        if connection.sock is not None:
                            began.append(connection.sock)
                        answer = connection.getresponse()
                        body = self._read(answer, reading, watch)
                    except (ConnectionError, http.client.HTTPException, OSError) as exc:
                        self._forget()
                        if watch.fired:
                            raise reading.too_slow() from None
                        if reused and not fresh and isinstance(exc, ConnectionError):
                            continue  # a kept connection the engine had closed: once more
                        raise
                    except BaseException:
                        self._forget()
                        raise
                if answer.will_close:
                    self._forget()
                if answer.status >= 400:
                    raise refusal(answer.status, body)
                return body
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _read(self, answer: http.client.HTTPResponse, reading: Reading, watch: Watch) -> bytes:
        """The answer's body, in pieces: given up once over its bound, or past its deadline
        (which each piece moves on)."""
        if 300 <= answer.status < 400:
            self._forget()
            raise redirected(reading.what, answer.status, answer.getheader("Location"))
        try:
            declared = answer.getheader("Content-Length")
            reading.declared(int(declared) if declared and declared.isdigit() else None)
            while piece := answer.read1(_CHUNK):
                reading.add(piece)
        except ClientError:
            self._forget()
            raise
        if watch.fired:  # its socket was shut: what came is not the whole answer
            raise reading.too_slow()
        if answer.length:  # the connection ended before the length it declared
            self._forget()
            raise Unreachable(f"the engine's answer to {reading.what} broke off before its end")
        answer.close()  # read to its end: the connection may serve the next request
        return reading.body()

    def _connection(
        self, where: urllib.parse.SplitResult
    ) -> tuple[http.client.HTTPConnection, bool]:
        """This thread's connection to the engine at ``where``, and whether it served a
        request before (one to another engine, asked before a switch, is closed)."""
        host, port = where.hostname or "127.0.0.1", where.port
        kept: http.client.HTTPConnection | None = getattr(self._kept, "connection", None)
        if kept is not None and (kept.host, kept.port) == (host, port or kept.default_port):
            return kept, True
        self._forget()
        if where.scheme == "https":
            tls = self.tls or ssl.create_default_context()
            made: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, port, timeout=TIMEOUT_S, context=tls
            )
        else:
            made = http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)
        self._kept.connection = made
        return made, False

    def _forget(self) -> None:
        kept = getattr(self._kept, "connection", None)
        if kept is not None:
            kept.close()
            self._kept.connection = None

    def events(
        self, path: str, last_id: str | None = None, stop: Callable[[], bool] | None = None
    ) -> Iterator[ReceivedEvent]:
        """Server-sent events from ``path`` as they come, until the engine ends them or
        ``stop()`` is true (asked at each line: the engine's keepalives come every 15 s);
        a connection gone quiet or dropped is :class:`ClientError`."""
        request = self._request("GET", path, None, None)
        request.add_header("Accept", "text/event-stream")
        if last_id:
            request.add_header("Last-Event-ID", last_id)
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self.tls), _NoRedirect()
        )
        with (
            _failing_as(f"the live feed from {self.base_url} broke off"),
            opener.open(request, timeout=FEED_SILENCE_S) as answer,
        ):
            parser = EventParser(self.bounds.parsed_bytes)
            while line := answer.readline(EVENT_BYTES + 1):
                if stop is not None and stop():
                    return
                event = parser.feed(line)
                if event is not None:
                    yield event

    def _request(
        self, method: str, path: str, data: bytes | None, content_type: str | None
    ) -> urllib.request.Request:
        request = urllib.request.Request(f"{self.base_url}{path}", data=data, method=method)  # noqa: S310
        if content_type:
            request.add_header("Content-Type", content_type)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        return request


def _cut(connection: http.client.HTTPConnection, began: list[socket.socket]) -> None:
    """Shut the request's socket: the connection's, or (an answer that ends by closing
    the connection, HTTP/1.0 or ``Connection: close``) the one it began on, which
    ``http.client`` has let go of while the answer still reads from it."""
    shut(connection.sock)
    for sock in began:
        shut(sock)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The feed follows no redirect: its bearer token would go wherever it points."""

    def redirect_request(  # noqa: PLR0917 (urllib's signature)
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> NoReturn:
        raise redirected(f"GET {req.selector}", code, newurl)


@contextlib.contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """A refusal as :class:`EngineRefused`; a connection that fails as :class:`Unreachable`
    saying ``what`` and why."""
    try:
        yield
    except urllib.error.HTTPError as exc:
        raise _refused(exc) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        refused = isinstance(reason, ConnectionRefusedError)
        raise Unreachable(f"{what}: {reason}", unsent=refused) from None
    except http.client.HTTPException as exc:  # not HTTP, or it broke off mid-answer
        raise Unreachable(f"{what}: {type(exc).__name__} {exc}".rstrip()) from None


def _refused(error: urllib.error.HTTPError) -> EngineRefused:
    return refusal(error.code, error.read())
