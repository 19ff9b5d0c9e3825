"""What the agent attaches with (its configuration), a refusal, and how a failed attempt
to reach the engine is said in one sentence."""

from __future__ import annotations

import logging
import os
import socket
import ssl
from dataclasses import dataclass, field

import aiohttp

from fluksio.agent import __version__
from fluksio.agent.calls import NOTICE_S
from fluksio.agent.connect_to import RoutedConnector
from fluksio.agent.errors import AgentError
from fluksio.agent.inventory import Inventory
from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import PROTOCOL, HelloFrame, InventoryReport
from fluksio.agent.settings import WorkerSettings
from fluksio.agent.urls import AttachUrl, Route

__all__ = [
    "MAX_FRAME_BYTES",
    "AgentConfig",
    "Refused",
    "connector_for",
    "describe_failure",
    "dial",
    "hello_frame",
    "keeps_calls_s",
    "offered_artifacts",
    "reconnect_delay",
    "untrusted",
    "why_refused",
]


log = logging.getLogger("fluksio.worker")
MAX_FRAME_BYTES = 64 * 1024 * 1024


def connector_for(config: AgentConfig) -> aiohttp.BaseConnector:
    """How the agent reaches the engine: directly, or at ``--connect-to``; TLS trusting
    ``--ca-file`` (or the system's CAs)."""
    tls = config.tls if config.tls else True
    if config.route is not None:
        return RoutedConnector(config.route, ssl=tls)
    return aiohttp.TCPConnector(ssl=tls)


async def dial(http: aiohttp.ClientSession, config: AgentConfig) -> aiohttp.ClientWebSocketResponse:
    """The attach socket, or :class:`Refused` saying why the token was not taken."""
    try:
        return await http.ws_connect(
            config.url.websocket,
            headers={"Authorization": f"Bearer {config.token}"},
            # No aiohttp heartbeat: it closes after 1.5 unanswered pings, long before the
            # 90-second rule. Silence is judged by the session instead.
            autoping=False,
            max_msg_size=MAX_FRAME_BYTES,
            compress=0,
        )
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status in (401, 403):
            raise Refused(await why_refused(http, config, exc.status)) from None
        raise


def reconnect_delay(attempt: int, cap_s: float, draw: float) -> float:
    """How long to wait before dialling again after ``attempt`` failures in a row: 0.5 s
    doubling up to ``cap_s``, times ``draw`` (uniform in [0, 1)) stretched to [0.1, 1].
    Drawn over nearly the whole window, not its upper half: workers that lost one engine
    come back to the next spread over the wait they were in, not bunched in half of it."""
    return min(cap_s, 0.5 * 2.0**attempt) * (0.1 + 0.9 * draw)


class Refused(AgentError):
    """The engine will not take this worker; retrying cannot help."""


@dataclass
class AgentConfig:
    """What the agent runs with: the options as given (``settings``, read from there and
    nowhere else) and what is found from them once at start: the URL parsed, the token
    checked, the name and labels resolved, the machine's inventory, the job's end, the
    TLS trust and the way to the engine."""

    settings: WorkerSettings
    url: AttachUrl
    token: str
    name: str
    labels: list[str]
    inventory: Inventory
    pipeline: int = 0
    """Calls taken ahead of a free slot (``--pipeline``, or twice ``--parallel``)."""
    gone_s: float = 90.0
    """Nothing from the engine (not even a ping) for this long: the connection is dead."""
    ping_s: float = 15.0
    """How often the agent pings the engine, so either side sees the other is alive."""
    backoff_max_s: float = 30.0
    venv_digest: str = ""
    slurm_job_id: str | None = None
    ends_at: float | None = None
    """When the batch job it runs in ends (a Unix time), if it does."""
    notice_s: float = NOTICE_S
    """A call that runs until the job's end gets its notice signal this long before
    (``--notice-s``, or fitted to the job)."""
    tls: ssl.SSLContext | None = None
    """Whom to trust for wss:// and https:// (None: the system's CAs, SSL_CERT_FILE)."""
    extra_env: dict[str, str] = field(default_factory=dict)
    route: Route | None = None
    """``--connect-to``: where the attach URL's host and port are reached instead."""
    others: tuple[AttachUrl, ...] = ()
    """The other engines' attach URLs (``--url`` given more than once), tried in turn
    after ``url`` fails."""

    def next_engine(self) -> None:
        """Dial the next engine's URL from now on (the one that failed goes last)."""
        if not self.others:
            return
        self.url, self.others = self.others[0], (*self.others[1:], self.url)
        if not self.url.artifacts_given:
            self.extra_env["FLUKSIO_ARTIFACT_URL"] = self.url.artifacts


def untrusted(exc: aiohttp.ClientConnectorCertificateError) -> str:
    """A certificate the agent will not trust, as one sentence: the host and why."""
    host = f"{exc.host}:{exc.port}"
    cause = exc.certificate_error
    reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or cause
    return (
        f"the engine's TLS certificate at {host} is not trusted ({reason}): give the agent"
        " its CA with --ca-file (or SSL_CERT_FILE), or check the URL's host name"
    )


def describe_failure(exc: BaseException) -> str:
    """Why a connection failed, in the system's words: "connection refused
    (10.0.0.2:8443)" says nothing listens there for us (an air gap, a firewall), where
    aiohttp's own text says only that the connect call failed."""
    if isinstance(exc, aiohttp.ClientConnectorError) and not isinstance(
        exc, aiohttp.ClientSSLError
    ):
        error = exc.os_error
        if not isinstance(error, socket.gaierror) and error.errno and error.errno > 0:
            return f"{os.strerror(error.errno).lower()} ({exc.host}:{exc.port})"
    return str(exc) or type(exc).__name__


def offered_artifacts(config: AgentConfig, offered: object) -> dict[str, str]:
    """The engine's public artifact URL for calls, unless ``--artifact-url`` was given."""
    if not isinstance(offered, str) or config.url.artifacts_given:
        return {}
    url = config.url.offered_artifacts(offered)
    if url is None:
        log.warning("the engine offered artifacts at %s over plain HTTP; not used", offered)
        return {}
    return {"FLUKSIO_ARTIFACT_URL": url}


async def why_refused(http: aiohttp.ClientSession, config: AgentConfig, status: int) -> str:
    """The engine's sentence for a refused token, asked of the token endpoint."""
    base = config.url.artifacts.rsplit("/artifacts", 1)[0]
    try:
        async with http.get(
            f"{base}/workers/tokens/self",
            headers={"Authorization": f"Bearer {config.token}"},
        ) as answer:
            detail = (await answer.json()).get("detail")
    except (aiohttp.ClientError, ValueError, AttributeError):
        detail = None
    return str(detail or f"the engine refused the worker token (HTTP {status})")


STOP_SPARE_S = 10.0
"""Past ``--engine-away-s``, what stopping its calls may take: a call's whole tree gone
(within 5 s), with room to spare."""


def keeps_calls_s(engine_away_s: float | None) -> float | None:
    """How long after it lost its engine the agent may still run its calls (the hello's
    ``keeps_s``); None: for ever."""
    return engine_away_s + STOP_SPARE_S if engine_away_s else None


def hello_frame(
    config: AgentConfig, launcher: Launcher, resume: list[str] | None, instance: str
) -> HelloFrame:
    """What the agent says first: who it is (``instance``: its process, among workers of
    one token and name), what it has, and (``resume``) the calls it carries over a dropped
    connection."""
    inventory = config.inventory
    return HelloFrame(
        protocol=PROTOCOL,
        name=config.name,
        labels=config.labels,
        python=launcher.python,
        python_version=".".join(map(str, launcher.version)),
        max_parallel=config.settings.parallel,
        pipeline=config.pipeline,
        venv_digest=config.venv_digest,
        inventory=InventoryReport(
            cpus=inventory.cpus, gpus=inventory.gpus, ram_mb=inventory.ram_mb
        ),
        version=__version__,
        slurm_job_id=config.slurm_job_id,
        host=socket.gethostname(),
        ends_at=config.ends_at,
        notice_s=config.notice_s,
        relayed=config.route is not None,
        keeps_s=keeps_calls_s(config.settings.engine_away()),
        instance=instance,
        resume=resume,
        containers=None if launcher.containers is None else launcher.containers.report(),
    )
