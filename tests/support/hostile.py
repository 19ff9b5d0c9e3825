"""A server on 127.0.0.1 that answers as a broken or hostile engine would (or a proxy in
front of one): whatever bytes a test scripts, as slowly as it likes, and it records every
request it was sent, headers included.

Each script is bounded: it writes at most a set number of bytes or for a set time, and
stops as soon as the client hangs up, so no test waits on it.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Hostile", "Reply", "hostile_server"]

Reply = Callable[[socket.socket, str], None]
"""Writes the answer to a request for ``path`` on the socket."""


@dataclass
class Hostile:
    url: str
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """Each request: its path, and its headers (names lower-cased)."""


@contextmanager
def hostile_server(reply: Reply) -> Iterator[Hostile]:
    """A server that answers every request with ``reply``; its URL and what it saw."""
    seen: list[tuple[str, dict[str, str]]] = []

    class Handler(socketserver.StreamRequestHandler):
        rbufsize = 0  # the head read unbuffered: a reply reads the body from the socket

        def handle(self) -> None:
            line = self.rfile.readline(65536).decode("latin-1")
            headers = {}
            while (header := self.rfile.readline(65536).decode("latin-1").strip()) != "":
                name, _, value = header.partition(":")
                headers[name.strip().lower()] = value.strip()
            path = line.split(" ")[1] if line.count(" ") >= 2 else "/"
            seen.append((path, headers))
            with contextlib.suppress(OSError):  # the client hung up, as a bounded one does
                reply(self.connection, path)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Hostile(f"http://127.0.0.1:{server.server_address[1]}", seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def head(status: str, *headers: str) -> bytes:
    return ("\r\n".join([f"HTTP/1.1 {status}", *headers, "", ""])).encode("latin-1")


def endless_chunks(most_bytes: int) -> Reply:
    """A chunked body that goes on (up to ``most_bytes`` of spaces, then it ends)."""

    def reply(connection: socket.socket, _path: str) -> None:
        connection.sendall(head("200 OK", "Content-Type: application/json",
                                "Transfer-Encoding: chunked"))  # fmt: skip
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
        for _ in range(most_bytes >> 16):
            connection.sendall(chunk)
        connection.sendall(b"0\r\n\r\n")  # an end, had the client read that far

    return reply


def trickle(*, headers_first: bool, every_s: float, most_s: float) -> Reply:
    """A byte every ``every_s`` seconds, of the body (or of the headers), for ``most_s``."""

    def reply(connection: socket.socket, _path: str) -> None:
        if headers_first:
            connection.sendall(head("200 OK", "Content-Type: application/json",
                                    "Content-Length: 100000"))  # fmt: skip
        else:
            connection.sendall(b"HTTP/1.1 200 OK\r\n")
        until = time.monotonic() + most_s
        while time.monotonic() < until:
            connection.sendall(b" " if headers_first else b"X")
            time.sleep(every_s)

    return reply


def trickle_until_closed(*, every_s: float, most_s: float) -> Reply:
    """An HTTP/1.0 answer that ends by closing the connection (no length, no chunks), its
    body a byte every ``every_s`` seconds for ``most_s``."""

    def reply(connection: socket.socket, _path: str) -> None:
        connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n")
        connection.sendall(b"Connection: close\r\n\r\n")
        until = time.monotonic() + most_s
        while time.monotonic() < until:
            connection.sendall(b" ")
            time.sleep(every_s)

    return reply


def fixed(status: str, body: bytes, *headers: str) -> Reply:
    """One whole answer."""

    def reply(connection: socket.socket, _path: str) -> None:
        length = f"Content-Length: {len(body)}"
        connection.sendall(head(status, length, *headers) + body)

    return reply
