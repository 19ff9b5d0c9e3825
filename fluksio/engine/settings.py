"""Everything the engine is configured with, in one frozen value built by the CLI or tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fluksio.engine.datadir import DataDir
from fluksio.engine.tokens import ACCESS_TOKEN_TTL_S

__all__ = ["EngineSettings"]


@dataclass(frozen=True)
class EngineSettings:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: Path | None = None
    """The certificate chain (PEM) to serve HTTPS and WSS with; None: plain HTTP."""
    tls_key: Path | None = None
    insecure: bool = False
    public_url: str | None = None
    """The engine as workers and browsers reach it (behind a proxy); None: as they dial it."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks whose ``X-Forwarded-For``/``-Proto`` the engine believes."""
    """Serve plain HTTP on an address other than loopback (a TLS proxy in front)."""
    access_token_ttl_s: float = ACCESS_TOKEN_TTL_S
    # Login slowdown (see fluksio.api.throttle): free failures, then doubling waits.
    login_free_failures: int = 5
    login_base_delay_s: float = 1.0
    login_max_delay_s: float = 300.0
    # aiohttp reads request bodies whole for JSON endpoints; large uploads stream elsewhere.
    client_max_size: int = 1024 * 1024
    engine_slots: int | None = None
    """Calls the engine runs at once itself; None: two per core."""
    node_python: str | None = None
    """The interpreter the engine runs node code with; None: the engine's own."""
    runner_mode: str = "auto"
    """``auto`` (fork server where it works, else spawn), ``fork`` or ``spawn``."""
    worker_hello_timeout_s: float = 10.0
    worker_gone_s: float = 90.0
    """A worker that sends nothing (not even a pong) for this long is gone: the one rule."""
    worker_check_s: float = 2.0
    """How often attached workers are checked (silence, revocation, key rotation)."""
    worker_ping_s: float = 15.0
    worker_take_s: float = 15.0
    """A call sent to a worker that has sent nothing at all since, for this long, was never
    taken (the worker froze first): it goes back to the queue, and the worker is told to
    drop it."""
    """How often the engine pings each worker, so a healthy idle one is seen to be alive."""
    max_frame_bytes: int = 64 * 1024 * 1024
    worker_frames_per_s: float = 5000.0
    """A worker sending more frames a second than this, on average, is disconnected."""
    worker_frame_burst: float = 50000.0
    """... after a burst of this many."""
    max_artifact_bytes: int = 10 * 1024**3
    """The largest artifact upload taken (``--max-artifact-bytes``); larger is a 413."""
    walltime_margin_s: float = 60.0
    """Time to spare before a worker's batch job ends: a call is placed there only if its
    limit and this fit, and an idle worker with less than this left is let go."""

    event_buffer: int = 10_000
    """Events the live feed keeps for subscribers that reconnect (``--event-buffer``); one
    further behind is told to refetch."""
    event_buffer_bytes: int = 64 << 20
    """The most text the live feed keeps (``--event-buffer-bytes``), whatever the count."""

    @property
    def layout(self) -> DataDir:
        return DataDir(self.data_dir)
