"""Everything ``fluksio-worker`` is started with, each option declared once.

An option is a field of :class:`WorkerSettings`: its type, its default and its
:class:`~fluksio.agent.declared.Flag` (help, bounds or choices, and the environment
variable where it has one). The command's options are made from these declarations
(:func:`worker_options`), as ``fluksio serve``'s are from the engine's settings. What is
read from them (the URL parsed, the machine's inventory, the TLS trust) is the agent's
configuration, :class:`~fluksio.agent.attaching.AgentConfig`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fluksio.agent.calls import NOTICE_S, NOTICE_SIGNALS
from fluksio.agent.containers import RUNTIMES
from fluksio.agent.declared import (
    YEAR_AND_A_DAY_S,
    Flag,
    declared_flags,
    flag_option,
    setting,
)
from fluksio.agent.protocol.frames import MAX_PIPELINE

__all__ = ["ENGINE_AWAY_S", "HEARTBEAT_S", "WorkerSettings", "worker_options"]

Command = TypeVar("Command", bound=Callable[..., Any])

ENGINE_AWAY_S = 600.0
"""Long enough for an engine's restart or upgrade (``--engine-away-s``)."""
HEARTBEAT_S = 10.0
"""How often a running call's heartbeat is sent (``--heartbeat``)."""


@dataclass(frozen=True)
class WorkerSettings:
    url: tuple[str, ...] = field(
        metadata={
            "flag": Flag(
                "The engine's attach URL: wss://HOST/api/v1/workers/attach; repeatable, for"
                " the engines of one database (one active, the others standby): tried in"
                " turn.",
                many=True,
            )
        }
    )
    token: str | None = setting(
        None, Flag("The worker token minted on the engine.", envvar="FLUKSIO_WORKER_TOKEN")
    )
    name: str | None = setting(None, Flag("How this worker shows up (default: this host's name)."))
    labels: str = setting("", Flag("Comma-separated labels, each signed by the token."))
    python: str | None = setting(
        None, Flag("The interpreter node code runs on (default: this one).")
    )
    parallel: int = setting(
        1, Flag("How many node calls it takes at once.", kind=int, minimum=1, maximum=4096)
    )
    pipeline: int | None = setting(
        None,
        Flag(
            "How many more calls it takes ahead, each started as a slot frees, so that a far"
            " worker has its next call when one ends (default: twice --parallel; 0: none).",
            kind=int,
            minimum=0,
            maximum=MAX_PIPELINE,
        ),
    )
    artifact_url: str | None = setting(
        None, Flag("Where the artifact store is, if not beside the socket.")
    )
    cpus: int | None = setting(
        None, Flag("Cores to advertise.", kind=int, minimum=0, maximum=1 << 20)
    )
    gpus: int | None = setting(None, Flag("GPUs to advertise.", kind=int, minimum=0, maximum=4096))
    ram_mb: int | None = setting(
        None, Flag("Memory to advertise, in MB.", kind=int, minimum=0, maximum=1 << 40)
    )
    max_idle: float | None = setting(
        None,
        Flag(
            "Stop after this many seconds with nothing running.",
            kind=float,
            minimum=0,
            maximum=YEAR_AND_A_DAY_S,
            above_minimum=True,
        ),
    )
    engine_away_s: float = setting(
        ENGINE_AWAY_S,
        Flag(
            "Once attached, how long to wait for an engine that went away (a restart, an"
            " upgrade) to come back; then stop what runs and exit 4. 0: for ever.",
            kind=float,
            minimum=0,
            maximum=YEAR_AND_A_DAY_S,
        ),
    )
    notice_s: float | None = setting(
        None,
        Flag(
            "A call that runs until this machine's job ends (its node set no limit) gets its"
            f" notice signal this many seconds before it is stopped (default: {NOTICE_S:g},"
            " at most a quarter of the job's length as it starts).",
            kind=float,
            minimum=0,
            maximum=YEAR_AND_A_DAY_S,
        ),
    )
    notice_signal: str = setting(
        "SIGUSR1",
        Flag(
            "The signal a call gets as its notice (and when this worker is told to stop).",
            choices=NOTICE_SIGNALS,
        ),
    )
    ends_at: str | None = setting(
        None,
        Flag(
            "When this machine goes away (Unix or ISO 8601 time); in a Slurm job, its end is"
            " found by itself.",
            envvar="FLUKSIO_WORKER_ENDS_AT",
        ),
    )
    insecure: bool = setting(
        False, Flag("Allow ws:// and http:// to hosts other than this one.", kind=bool)
    )
    ca_file: str | None = setting(
        None,
        Flag(
            "Also trust the CAs in this PEM file (a private CA); SSL_CERT_FILE works too.",
            envvar="FLUKSIO_WORKER_CA_FILE",
        ),
    )
    heartbeat: float = setting(
        HEARTBEAT_S,
        Flag(
            "How often a running call's heartbeat is sent, in seconds.",
            kind=float,
            minimum=0.05,
            maximum=3600,
            hidden=True,
        ),
    )
    runner_mode: str = setting(
        "auto",
        Flag(
            "How calls are started: from a fork server, or spawned.",
            choices=("auto", "fork", "spawn"),
            hidden=True,
        ),
    )
    connect_to: str | None = setting(
        None,
        Flag(
            "Reach the --url's host and port at HOST:PORT instead (a relay on a login node);"
            " TLS still verifies the engine's own name. The artifact transfers take the"
            " same way.",
            metavar="HOST:PORT",
            envvar="FLUKSIO_WORKER_CONNECT_TO",
        ),
    )
    containers: str | None = setting(
        None,
        Flag(
            "Run calls that name a container image, with this runtime (checked at start);"
            " only images an --allow-image matches.",
            choices=tuple(RUNTIMES),
        ),
    )
    allow_image: tuple[str, ...] = setting(
        (),
        Flag(
            "An image calls may run in, as a pattern ('registry.example/*'); repeatable.",
            many=True,
            metavar="PATTERN",
        ),
    )
    dev_dir: Path = field(
        default=Path("/dev"),
        metadata={"flag": Flag("Where GPUs are counted as device nodes.", kind=Path, hidden=True)},
    )
    artifact_transport: str = setting(
        "auto",
        Flag(
            "auto: use the engine's store directly where this host shares it; http: never.",
            choices=("auto", "http"),
            hidden=True,
        ),
    )
    report_cache: bool = setting(
        True,
        Flag(
            "Tell the engine what the artifact cache holds.", kind=bool, negatable=True, hidden=True
        ),
    )

    def engine_away(self) -> float | None:
        """How long an engine that went away is waited for; None: for ever (``0``)."""
        return self.engine_away_s or None

    @property
    def shares_store(self) -> bool:
        """Whether the engine's store is used directly where this host provably shares it."""
        return self.artifact_transport == "auto"


def worker_options(command: Command) -> Command:
    """Every option of ``fluksio-worker``, in the order they are declared."""
    for declared, flag in reversed(declared_flags(WorkerSettings)):
        command = flag_option(declared, envvar=flag.envvar)(command)
    return command
