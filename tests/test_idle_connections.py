"""Connections that never send a request are closed, on plain and TLS listeners: real
engine processes and real sockets.

Before, three connections that sent nothing and one with half a request head were all
still open after 95 s: no credential is needed to hold an engine's sockets that way.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.certs import CertificateAuthority
from tests.support.engine import EngineProcess, start_engine
from tests.support.wait import wait_for

pytestmark = pytest.mark.process

SLACK_S = 15  # a loaded machine's lateness, well under what was seen before (never)
# Shorter than the defaults (30 s and 20 s), which are the same code with other numbers.
REQUEST_HEAD_S = 4
TLS_HANDSHAKE_S = 3
BOUNDS = ("--idle-connection-s", str(REQUEST_HEAD_S), "--tls-handshake-s", str(TLS_HANDSHAKE_S))


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[EngineProcess, EngineProcess, Path]]:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("engine", ["127.0.0.1"])
    plain = start_engine(tmp_path / "plain", tmp_path / "plain-logs", args=BOUNDS)
    tls = start_engine(
        tmp_path / "tls",
        tmp_path / "tls-logs",
        args=("--tls-cert", str(pair.cert), "--tls-key", str(pair.key), *BOUNDS),
        ca_file=str(ca.pem),
    )
    yield plain, tls, ca.pem
    tls.stop()
    plain.stop()


def _connect(engine: EngineProcess) -> socket.socket:
    address = urlsplit(engine.url)
    return socket.create_connection((address.hostname, address.port), timeout=10)


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the engine has closed it (nothing is ever sent on these, so any byte read
    would be an answer: there is none to a request never made)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (OSError, ssl.SSLError):
        return True


def test_connections_without_a_request_head_are_closed_on_plain_and_tls(
    engines: tuple[EngineProcess, EngineProcess, Path],
) -> None:
    plain, tls, ca_pem = engines
    opened = time.monotonic()
    with contextlib.ExitStack() as stack:
        silent = [stack.enter_context(_connect(plain)) for _ in range(3)]
        half = stack.enter_context(_connect(plain))
        half.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # One answered, then idle: kept alive only as long as an unopened one.
        answered = stack.enter_context(_connect(plain))
        answered.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert answered.recv(65536).startswith(b"HTTP/1.1 200"), "the engine answers"
        no_hello = stack.enter_context(_connect(tls))
        context = ssl.create_default_context(cafile=str(ca_pem))
        shook = stack.enter_context(context.wrap_socket(_connect(tls), server_hostname="127.0.0.1"))
        plain_ones = [*silent, half, answered]
        closed_at: dict[int, float] = {}

        def all_closed() -> bool:
            for sock in [*plain_ones, no_hello, shook]:
                if id(sock) not in closed_at and _closed_by_peer(sock):
                    closed_at[id(sock)] = time.monotonic() - opened
            return len(closed_at) == len(plain_ones) + 2

        bound = TLS_HANDSHAKE_S + REQUEST_HEAD_S + SLACK_S
        wait_for(all_closed, timeout=bound + 10, what="the idle connections closed")
    assert max(closed_at[id(s)] for s in plain_ones) <= REQUEST_HEAD_S + SLACK_S, closed_at
    assert closed_at[id(no_hello)] <= TLS_HANDSHAKE_S + SLACK_S, closed_at
    assert closed_at[id(shook)] <= bound, closed_at
    # Only idleness is cut: the engines still answer new connections.
    for engine in (plain, tls):
        assert engine.client().request("GET", "/health").status == 200
