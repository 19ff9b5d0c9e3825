"""Running one engine: listen, and stop cleanly on a signal, within a stated bound.

The data directory's lock (:mod:`fluksio.engine.holding`) is taken by the caller first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from cryptography import x509

from fluksio.agent.urls import is_loopback
from fluksio.api.app import create_app
from fluksio.clock import SYSTEM_CLOCK
from fluksio.engine.holding import STOP_WITHIN_S, note_stopping
from fluksio.engine.provisioning import Configured, load_configured
from fluksio.engine.settings import EngineSettings
from fluksio.errors import ConfigError
from fluksio.logs import LogSecrets, get_logger

__all__ = ["run_engine", "tls_context"]

log = get_logger(__name__)
REQUESTS_AT_STOP_S = 2.0
"""At a stop, how long a request under way may go on before it is cut."""


class _ListenerSite(web.BaseSite):
    """aiohttp's site on a socket we bound, with the TLS handshake bounded too (asyncio's
    default is 60 s): idle sockets cannot pile up before a request head either."""

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None,
        handshake_s: float,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._sock = sock
        self._handshake_s = handshake_s

    @property
    def name(self) -> str:
        return repr(self._sock.getsockname())

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None  # the runner is set up before any site starts
        self._server = await asyncio.get_running_loop().create_server(
            server,
            sock=self._sock,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self._handshake_s if self._ssl_context else None,
            backlog=self._backlog,
        )


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    family, kind, proto, _name, address = infos[0]
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
        listener.listen(512)
    except OSError as exc:
        listener.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    listener.setblocking(False)
    return listener


def _own_address(listener: socket.socket) -> tuple[str, int]:
    """Where this machine reaches the listener: a wildcard address is its loopback."""
    host, port = listener.getsockname()[:2]
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 (read, not bound)
    return wildcard.get(host, host), int(port)


def _url(host: str, port: int, *, tls: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


def tls_context(settings: EngineSettings) -> ssl.SSLContext | None:
    """The server's TLS context, or None for plain HTTP; refuses what would be unsafe.

    Plain HTTP is for loopback (a TLS proxy in front, or one machine): elsewhere tokens
    would cross the network in the clear, so it takes ``--insecure`` to say so.
    """
    cert, key = settings.tls_cert, settings.tls_key
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key go together: give both, or neither")
    if cert is None or key is None:
        if not is_loopback(settings.host) and not settings.insecure:
            raise ConfigError(
                f"refusing to serve plain HTTP on {settings.host}: tokens would cross the"
                " network unencrypted; give --tls-cert and --tls-key, or --insecure when a"
                " TLS proxy in front of the engine terminates TLS"
            )
        return None
    warning = certificate_warning(cert, SYSTEM_CLOCK.now())
    if warning is not None:
        log.warning("engine.certificate", problem=warning)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise ConfigError(
            f"--tls-cert {cert} / --tls-key {key}: cannot be used ({reason})"
        ) from None
    return context


CERT_WARN_DAYS = 14
"""A certificate that expires sooner than this is warned about at start."""


def certificate_warning(cert: Path, now: float) -> str | None:
    """What is wrong with the certificate's dates, in a sentence, or None.

    Served all the same (whether to trust it is each client's call, and a test of the
    agent's refusal needs an engine that serves one), but never without a word.
    """
    try:
        leaf = x509.load_pem_x509_certificate(cert.read_bytes())
    except (OSError, ValueError):
        return None  # not readable as PEM here: load_cert_chain says why, in one sentence
    ends = leaf.not_valid_after_utc
    starts = leaf.not_valid_before_utc
    if ends.timestamp() <= now:
        return (
            f"--tls-cert {cert} expired on {ends:%Y-%m-%d %H:%M} UTC: workers and browsers"
            " will refuse it; renew it"
        )
    if starts.timestamp() > now:
        return (
            f"--tls-cert {cert} is not valid before {starts:%Y-%m-%d %H:%M} UTC: is this"
            " machine's clock right?"
        )
    if ends.timestamp() - now < CERT_WARN_DAYS * 86400:
        days = (ends.timestamp() - now) / 86400
        return f"--tls-cert {cert} expires on {ends:%Y-%m-%d %H:%M} UTC, in {days:.1f} days"
    return None


async def run_engine(
    settings: EngineSettings,
    *,
    on_ready: Callable[[str], None],
    provisioners: Configured | None = None,
    stop: asyncio.Event | None = None,
    log_secrets: LogSecrets | None = None,
) -> None:
    """Serve until ``stop`` is set, or (without one) until SIGINT or SIGTERM; ``on_ready``
    gets the base URL once listening; ``log_secrets``: what the engine's logs never show."""
    layout = settings.layout
    context = tls_context(settings)  # a bad certificate is one sentence, before anything
    # Bind before anything starts, so a busy port is one sentence and nothing else.
    listener = _listen(settings.host, settings.port)
    url = _url(settings.host, int(listener.getsockname()[1]), tls=context is not None)
    configured = provisioners if provisioners is not None else load_configured(layout)
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
    fence, keeping = None, None
    if settings.database is not None:
        # Imported here: an engine on SQLite never loads the PostgreSQL driver (0.16 s).
        from fluksio.api.leadership import Leadership  # noqa: PLC0415

        leadership = Leadership(settings, settings.public_url or url)
        layout.write_engine_info(pid=os.getpid(), url=url)  # a standby listens too
        try:
            fence = await leadership.standby_until_active(listener, context, stop)
        finally:
            if fence is None:
                layout.engine_info.unlink(missing_ok=True)
        if fence is None:
            return  # stopped while a standby
        keeping = asyncio.ensure_future(leadership.keep(fence))
    app = create_app(
        settings,
        provisioners=configured,
        address=_own_address(listener),
        log_secrets=log_secrets,
        fence=fence,
    )
    # A connection without a request head is closed (a WebSocket, a feed and a long poll
    # are answers under way, never idle).
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=settings.idle_connection_s,
        # Long polls and the feed end as the engine stops (they are woken); what is left
        # of a request after this is cut, and its client asks again once the engine is
        # back (aiohttp's own default waits 60 s, which held up a stop with a client).
        shutdown_timeout=REQUESTS_AT_STOP_S,
    )
    try:
        await runner.setup()
        await _ListenerSite(runner, listener, context, settings.tls_handshake_s).start()
        layout.write_engine_info(pid=os.getpid(), url=url)
        log.info("engine.listening", url=url, data_dir=str(layout.root))
        on_ready(url)
        await stop.wait()
        log.info("engine.stopping", within_s=STOP_WITHIN_S)
        note_stopping(layout)
    finally:
        if keeping is not None:
            keeping.cancel()
        await _stopped_within(runner, STOP_WITHIN_S)
        layout.engine_info.unlink(missing_ok=True)


async def _stopped_within(runner: web.AppRunner, bound_s: float) -> None:
    """Stop the server and the engine, within ``bound_s`` on real time (an engine on a
    test's clock stops all the same): past it, what is left is cut short, leaving the
    state as a crash would, for the next engine to recover."""
    cleanup = asyncio.ensure_future(runner.cleanup())
    done, _ = await asyncio.wait([cleanup], timeout=bound_s)
    if done:
        cleanup.result()
        return
    log.warning("engine.stop_overdue", within_s=bound_s)
    cleanup.cancel()
    await asyncio.wait([cleanup], timeout=1.0)
