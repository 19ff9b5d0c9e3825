"""Everything the engine is configured with, in one frozen value, each setting declared once.

A setting is a field of :class:`EngineSettings` with its type, its default and a
:class:`~fluksio.agent.declared.Flag`: the help a person reads, its bounds or choices.
``fluksio serve`` makes its options from these declarations (``--name-with-dashes``, and
``FLUKSIO_NAME`` in the environment), so a setting cannot exist in one place and be
missing or different in the other; the worker's options are declared the same way
(:mod:`fluksio.agent.settings`). Tests build the value directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fluksio.agent.declared import YEAR_AND_A_DAY_S, Flag, setting
from fluksio.engine.datadir import DataDir

ACCESS_TOKEN_TTL_S = 24 * 3600
"""How long an access token is valid by default (``--access-token-ttl-s``)."""

__all__ = ["EngineSettings", "Flag"]

_HOUR_S = 3600.0
_DAY_S = 86400.0


@dataclass(frozen=True)
class EngineSettings:
    data_dir: Path = field(metadata={"flag": Flag("Where the engine keeps its state.", kind=Path)})
    database: str | None = setting(
        None,
        Flag(
            "Keep the state in PostgreSQL (postgresql://USER@HOST:PORT/NAME, no password in"
            " it: PGPASSFILE or --database-password-file) instead of SQLite in the data"
            " directory.",
            metavar="URL",
        ),
    )
    database_password_file: Path | None = setting(
        None, Flag("A file holding the --database role's password alone.", kind=Path)
    )
    lease_s: float = setting(
        10.0,
        Flag(
            "On PostgreSQL: how long the active engine's lease lasts unrenewed (renewed"
            " every third of it); a standby takes over once it has run out.",
            kind=float,
            minimum=2,
            maximum=600,
        ),
    )
    artifacts_dir: Path | None = setting(
        None,
        Flag(
            "Where artifacts are kept (default: DATA_DIR/artifacts); for engines of one"
            " --database, a filesystem each of them reaches.",
            kind=Path,
        ),
    )
    database_key_file: Path | None = setting(
        None,
        Flag(
            "With --database: a file (32 random bytes or more, the same on every engine of"
            " the database) that seals the engine's keys kept in it.",
            kind=Path,
        ),
    )
    host: str = setting("127.0.0.1", Flag("Address to listen on."))
    port: int = setting(
        8080,
        Flag(
            "Port to listen on; 0 picks a free one (written to DATA_DIR/engine.json).",
            kind=int,
            minimum=0,
            maximum=65535,
        ),
    )
    idle_connection_s: float = setting(
        30.0,
        Flag(
            "A connection that has not sent a complete request head this long after it"
            " opened, or after its last answer, is closed.",
            kind=float,
            minimum=1,
            maximum=3600,
        ),
    )
    tls_handshake_s: float = setting(
        20.0,
        Flag(
            "On a TLS listener, a connection that has not finished its handshake this long"
            " after it opened is closed (before the request head's own time starts).",
            kind=float,
            minimum=1,
            maximum=600,
        ),
    )
    tls_cert: Path | None = setting(
        None, Flag("Certificate chain (PEM): serve HTTPS and WSS on the one port.", kind=Path)
    )
    tls_key: Path | None = setting(None, Flag("The certificate's private key (PEM).", kind=Path))
    insecure: bool = setting(
        False,
        Flag(
            "Serve plain HTTP on an address other than loopback (a TLS proxy in front).", kind=bool
        ),
    )
    public_url: str | None = setting(
        None,
        Flag(
            "The engine as workers and browsers reach it, behind a proxy"
            " (https://fluksio.example.com): the attach command shown, and where workers"
            " find artifacts.",
            metavar="URL",
        ),
    )
    trusted_proxies: tuple[str, ...] = setting(
        (),
        Flag(
            "A reverse proxy (address or network, repeatable) whose X-Forwarded-For names"
            " the real client, for login throttling and logs.",
            name="trusted-proxy",
            many=True,
            metavar="ADDRESS",
        ),
    )
    access_token_ttl_s: float = setting(
        ACCESS_TOKEN_TTL_S,
        Flag(
            "How long an access token (a login) lasts, in seconds.",
            kind=float,
            minimum=60,
            maximum=YEAR_AND_A_DAY_S,
        ),
    )
    login_free_failures: int = setting(
        5,
        Flag(
            "Failed logins (by user and by address) before each next one waits.",
            kind=int,
            minimum=1,
            maximum=1_000_000,
        ),
    )
    login_base_delay_s: float = setting(
        1.0,
        Flag(
            "The first wait after the free failures; it doubles with each.",
            kind=float,
            minimum=0,
            maximum=_DAY_S,
        ),
    )
    login_max_delay_s: float = setting(
        300.0,
        Flag("The longest wait between failed logins.", kind=float, minimum=0, maximum=_DAY_S),
    )
    client_max_size: int = setting(
        1024 * 1024,
        Flag(
            "The largest JSON body a request may carry (artifact uploads stream apart).",
            kind=int,
            minimum=1024,
            maximum=1 << 30,
        ),
    )
    engine_slots: int | None = setting(
        None,
        Flag(
            "Node calls the engine runs at once itself (default: two per core).",
            kind=int,
            minimum=0,
            maximum=4096,
        ),
    )
    node_python: str | None = setting(
        None, Flag("Interpreter for node code run on the engine (default: the engine's own).")
    )
    runner_mode: str = setting(
        "auto",
        Flag(
            "How call processes start: a fork server where it works, or a fresh interpreter.",
            choices=("auto", "fork", "spawn"),
        ),
    )
    worker_hello_timeout_s: float = setting(
        10.0,
        Flag(
            "A worker that says no hello this long after connecting is refused.",
            kind=float,
            minimum=0.1,
            maximum=_HOUR_S,
        ),
    )
    worker_gone_s: float = setting(
        90.0,
        Flag(
            "A worker that sends nothing (not even a pong) this long is gone: the one rule.",
            kind=float,
            minimum=0.1,
            maximum=_DAY_S,
        ),
    )
    worker_check_s: float = setting(
        2.0,
        Flag(
            "How often attached workers are checked (silence, revocation, key rotation).",
            kind=float,
            minimum=0.05,
            maximum=_HOUR_S,
        ),
    )
    worker_ping_s: float = setting(
        15.0,
        Flag(
            "How often the engine pings each worker, so a healthy idle one is seen alive.",
            kind=float,
            minimum=0.05,
            maximum=_HOUR_S,
        ),
    )
    worker_take_s: float = setting(
        15.0,
        Flag(
            "A call sent to a worker that has sent nothing at all since, this long, was never"
            " taken (it froze first): it goes back to the queue, and the worker is told to"
            " drop it.",
            kind=float,
            minimum=0.1,
            maximum=_DAY_S,
        ),
    )
    worker_return_s: float = setting(
        300.0,
        Flag(
            "After a restart, how long a call found running on a worker waits for that worker"
            " to come back naming it (then it fails WorkerGone, or runs again where its node"
            " says retry_on_restart).",
            kind=float,
            minimum=0.1,
            maximum=_DAY_S,
        ),
    )
    crash_limit: int = setting(
        3,
        Flag(
            "How many times a call's worker may die under it (killed, out of memory, its"
            " job failed): at that many it fails NodeCrashedWorkers, naming each worker and"
            " job, and is not sent to another machine, whatever its retries.",
            kind=int,
            minimum=1,
            maximum=100,
        ),
    )
    max_frame_bytes: int = setting(
        64 * 1024 * 1024,
        Flag(
            "The largest frame a worker may send (a call's answer with its result).",
            kind=int,
            minimum=1024,
            maximum=1 << 30,
        ),
    )
    worker_frames_per_s: float = setting(
        5000.0,
        Flag(
            "A worker sending more frames a second than this, on average, is disconnected"
            " as flooding.",
            kind=float,
            minimum=1,
            maximum=1_000_000,
        ),
    )
    worker_frame_burst: float | None = setting(
        None,
        Flag(
            "... after a burst of this many frames (default: ten times the rate).",
            kind=float,
            minimum=1,
            maximum=100_000_000,
        ),
    )
    max_artifact_bytes: int = setting(
        10 * 1024**3,
        Flag(
            "The largest artifact upload the engine takes; a larger one is refused (413).",
            kind=int,
            minimum=1,
            maximum=1 << 50,
        ),
    )
    max_item_bytes: int = setting(
        1 << 20,
        Flag(
            "The largest array item (one line of an items_from artifact, or one of a node's"
            " items, as JSON); a run with a larger one is refused (422): name large data in"
            " an artifact instead.",
            kind=int,
            minimum=1024,
            maximum=64 << 20,
        ),
    )
    walltime_margin_s: float = setting(
        60.0,
        Flag(
            "Time to spare before a worker's batch job ends: a call goes there only if its"
            " limit and this fit; an idle worker with less left is let go.",
            kind=float,
            minimum=0,
            maximum=_DAY_S,
        ),
    )
    keep_runs_s: float = setting(
        90 * 86400.0,
        Flag(
            "Ended runs older than this (seconds since they ended) are deleted in the"
            " background, and then the artifacts nothing kept refers to; 0 keeps every run.",
            kind=float,
            minimum=0,
            maximum=100 * 365 * 86400.0,
        ),
    )
    prune_every_s: float = setting(
        600.0,
        Flag(
            "How often (seconds) ended runs past the retention age are looked for.",
            kind=float,
            minimum=0.1,
            maximum=86400,
        ),
    )
    event_buffer: int = setting(
        10_000,
        Flag(
            "Events the live feed keeps for subscribers that reconnect; one further behind"
            " is told to fetch its views again.",
            kind=int,
            minimum=10,
            maximum=10_000_000,
        ),
    )
    event_buffer_bytes: int = setting(
        64 << 20,
        Flag(
            "The most text (bytes) the live feed keeps, however few events that is; the"
            " oldest leave first.",
            kind=int,
            minimum=1 << 20,
            maximum=1 << 40,
        ),
    )

    @property
    def layout(self) -> DataDir:
        return DataDir(self.data_dir)

    @property
    def frame_burst(self) -> float:
        """The burst of frames a worker may send at once."""
        if self.worker_frame_burst is not None:
            return self.worker_frame_burst
        return 10 * self.worker_frames_per_s
