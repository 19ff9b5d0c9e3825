"""The attach socket's frames, in both directions, declared once (protocol 2).

Both sides import this module: the agent builds the frames it sends from these classes,
and the engine builds its own from them and validates what arrives against them (with a
pydantic ``TypeAdapter`` over these very dataclasses). Standard library only, since the
agent imports nothing else of Fluksio and the runner's host may have nothing more.

The vocabulary is the published agent's (``shared/spec/protocol.md``); fields marked
*ours* are additions an older engine ignores and this engine never requires. Unknown keys
are ignored on arrival, so a newer agent's additions never break an older engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from fluksio.agent.protocol.codec import decoded, encode

__all__ = [
    "CONTROL_FRAME_BYTES",
    "ENGINE_FRAMES",
    "IMAGE_HELD",
    "PROTOCOL",
    "THREAD_VARIABLES",
    "AnswerFrame",
    "ArtifactRef",
    "CancelFrame",
    "ContainerRef",
    "ContainersReport",
    "EngineFrame",
    "ErrorRecord",
    "HelloFrame",
    "InventoryReport",
    "LogFrame",
    "ProgressFrame",
    "RefusedFrame",
    "RunFrame",
    "RunRef",
    "StoppingFrame",
    "StoreOffer",
    "WelcomeFrame",
    "encode",
    "from_engine",
]

CONTROL_FRAME_BYTES = 1 << 20
"""The largest frame a worker may send that is not a call's answer (a hello, an event,
output lines); only an answer, which carries a result, may be larger, up to the engine's
``--max-frame-bytes``. A larger event or batch of lines fails its call as
``FrameTooLarge`` (one naming no call in flight is dropped); a larger hello is refused."""

PROTOCOL = 2
"""The protocol both sides speak; a hello naming another is refused with what to upgrade."""


# -- worker -> engine ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class InventoryReport:
    """What the worker's machine has; null where it could not tell."""

    cpus: int | None = None
    gpus: int | None = None
    ram_mb: int | None = None


@dataclass(frozen=True, kw_only=True)
class ContainersReport:
    """(ours) The containers a worker runs calls in: its runtime, and the images it allows
    (``--allow-image`` patterns). The images it holds ready are told with its cache's
    (:class:`CacheFrame`), as they change."""

    runtime: str
    images: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class HelloFrame:
    """The first frame a worker sends."""

    op: Literal["hello"] = "hello"
    protocol: int
    name: str
    labels: list[str] = field(default_factory=list)
    python: str = ""
    """The interpreter that runs its calls (a path)."""
    python_version: str | None = None
    """(ours) That interpreter's version, ``major.minor``."""
    max_parallel: int = 1
    """Calls it runs at once (``parallel`` is accepted as an alias on arrival)."""
    pipeline: int = 0
    """(ours) Calls it takes ahead of a free slot, each started as a slot frees, so that a
    far worker has its next call when one ends; it says ``started`` as each starts to an
    engine whose welcome took them."""
    venv_digest: str = ""
    inventory: InventoryReport = field(default_factory=InventoryReport)
    version: str | None = None
    """(ours) The agent's version; a hello without one comes from a published 0.1.x agent."""
    slurm_job_id: str | None = None
    """(ours) The batch job the worker runs in, if any."""
    host: str | None = None
    """(ours) The machine's host name (``name`` may be set to anything)."""
    ends_at: float | None = None
    """(ours) When the batch job the worker runs in ends (its walltime), a Unix time."""
    notice_s: float = 0.0
    """(ours) How long before that end a call running until it is told (``--notice-s``):
    the engine sends such a call only where its notice still fits."""
    relayed: bool = False
    """(ours) Its connection passes through a relay (``--connect-to``, a login node's) that
    can drop while the worker lives: a drop then holds its calls for it, by the 90-second
    rule, instead of failing them at once."""
    keeps_s: float | None = None
    """(ours) Once its connection is lost without the engine's word (a drop, or the
    engine's silence), how long it keeps its calls running before it stops them, at the
    most (its ``--engine-away-s`` and the time to stop them); None: no bound it can
    promise (``--engine-away-s 0``, or an agent that does not say). The engine runs a
    lost call again elsewhere only after that, or once the worker is back."""
    instance: str | None = None
    """(ours) An id the agent's process draws when it starts and says in every hello: a
    worker coming back with another was started again, and holds none of the calls it had
    (two workers may share a token and a name; none shares this)."""
    resume: list[str] | None = None
    """(ours) After such a drop: the calls it still holds (running, or answered while it
    was away), to be carried on this connection."""
    containers: ContainersReport | None = None
    """(ours) The containers it runs calls in; None: none (the published agent runs none,
    so a call in a container never goes to it)."""


@dataclass(frozen=True, kw_only=True)
class ProgressFrame:
    """A call's sign of life (``heartbeat``) or output (``emit``, ``yield``)."""

    call_id: str
    event: Literal["heartbeat", "emit", "yield", "started"]
    """``started``: (ours) a call sent ahead left the worker's line and runs now."""
    outputs: Any = None
    ts: float | None = None


@dataclass(frozen=True, kw_only=True)
class LogFrame:
    """(ours) Lines a running call wrote (its stdout and stderr), sent while it runs, to an
    engine whose welcome offered ``logs``. ``first`` is the position of ``lines[0]`` among
    all the lines the call wrote (from 0); a position skipped between two frames is a line
    not sent (the agent's rate bound, or a dropped connection). An empty ``lines`` at the
    end says how many lines there were. The answer's ``logs`` still carry the whole output."""

    call_id: str
    event: Literal["log"] = "log"
    first: int
    lines: list[str]


@dataclass(frozen=True, kw_only=True)
class CacheFrame:
    """(ours) What the worker's artifact cache holds, its largest entries first (at most
    :data:`CACHE_REPORTED`, of at least :data:`CACHE_REPORTED_FROM_BYTES` each: a summary
    that stays small however large the cache): sent to an engine whose welcome takes it,
    after the welcome and whenever it changes. The engine places a call where most of its
    inputs' bytes are."""

    op: Literal["cache"] = "cache"
    holds: list[str]
    """Digests, ``sha256:<hex>``; and the container images it holds ready,
    ``image:<name>`` (:data:`IMAGE_HELD`), which calls in them prefer alike."""


@dataclass(frozen=True, kw_only=True)
class StoppingFrame:
    """(ours) The worker was told to stop (SIGTERM: a preemption, its batch job's end, a
    service stopped): it finishes or stops what it runs and takes nothing new, so the
    engine sends it nothing more. Sent to an engine whose welcome takes it."""

    op: Literal["stopping"] = "stopping"
    reason: str


IMAGE_HELD = "image:"
"""How a held container image is named among a cache's holds (``image:<name>``)."""
MAX_PIPELINE = 256
"""The most calls a worker may take ahead of its free slots (``HelloFrame.pipeline``)."""
CACHE_REPORTED = 512
CACHE_REPORTED_FROM_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ErrorRecord:
    """Why a call failed, as the runner or the agent wrote it."""

    type: str = "RemoteError"
    message: str = ""
    short: str = ""
    traceback: str = ""


@dataclass(frozen=True, kw_only=True)
class AnswerFrame:
    """The one frame that ends a call: a ``call_id`` and no ``event``."""

    call_id: str
    ok: bool
    result: Any = None
    error: ErrorRecord | None = None
    logs: str = ""
    checkpoint: ArtifactRef | None = None
    """(ours) With the error ``Checkpointed``: the artifact reference of the state the
    call saved, given back to its next attempt. The published agent never sends it."""

    _omit_at_default: ClassVar[frozenset[str]] = frozenset({"result", "error", "checkpoint"})


# -- engine -> worker ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StoreOffer:
    """(ours) Where the engine's artifact store is, and a probe only a worker sharing its
    filesystem can read; such a worker's calls use the store directly."""

    path: str
    probe: str
    nonce: str


@dataclass(frozen=True, kw_only=True)
class WelcomeFrame:
    op: Literal["welcome"] = "welcome"
    protocol: int = PROTOCOL
    name: str
    """The worker's name as the engine shows it."""
    store: StoreOffer | None = None
    artifacts: str | None = None
    """(ours) The artifact URL behind the engine's ``--public-url``; the agent uses it
    unless told one (``--artifact-url``), and only under the same TLS rule as ``--url``."""
    logs: bool = False
    r"""(ours) The engine takes :class:`LogFrame`\ s: a call's lines while it runs."""
    pipeline: int = 0
    """(ours) How many calls ahead of a free slot the engine may send (at most the hello's
    ``pipeline``); when more than none, the worker says ``started`` as each starts."""
    cache: bool = False
    r"""(ours) The engine takes :class:`CacheFrame`\ s (it places calls by them)."""
    stopping: bool = False
    r"""(ours) The engine takes a :class:`StoppingFrame` (it then sends nothing more)."""
    gone_s: float | None = None
    """(ours) The engine's silence rule (``--worker-gone-s``): a worker it hears nothing
    from for this long is gone, its calls failed. The worker takes the same rule for the
    engine, so that both give the other up alike."""
    take_s: float | None = None
    """(ours) The engine's take rule (``--worker-take-s``): after it sends a call it must
    hear some frame of this worker's within this long. Told, the worker says a call is
    taken only if nothing else it sends says so first."""
    kept: list[str] | None = None
    """(ours) Of the calls the hello named (``resume``), those the engine carries on
    (adopted by an engine that restarted, or a relayed worker's come back). The worker
    drops the others at once, a waiting one before it starts: the engine failed or
    requeued them. None: an engine that does not say (it sends ``cancel`` for each)."""


@dataclass(frozen=True, kw_only=True)
class RefusedFrame:
    """Sent before closing: a sentence saying what to do. Retrying cannot help."""

    op: Literal["refused"] = "refused"
    reason: str


@dataclass(frozen=True, kw_only=True)
class RunRef:
    id: str


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    """(ours) A stored artifact, as the engine answers an upload."""

    digest: str
    """``sha256:<hex>``."""
    size: int
    media_type: str = "application/octet-stream"
    name: str = ""


THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)
"""The thread caps of a call granted ``threads``: the published agent is sent them in a
run frame's ``env`` (its protocol names the first five); our agent sets them itself."""


@dataclass(frozen=True, kw_only=True)
class ContainerRef:
    """(ours) The container a call runs in: its image, and the runtime its node named."""

    image: str
    runtime: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunFrame:
    """Run a node call (``run``), or only check that its source loads there (``compile``)."""

    op: Literal["run", "compile"] = "run"
    call_id: str
    """Unique per call, never reused."""
    flow: str
    node: str
    source: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    run: RunRef | None = None
    timeout: float = 0
    """Silence seconds: the call is stopped after this long without a sign of life."""
    env: dict[str, str] = field(default_factory=dict)
    """Thread caps and ``CUDA_VISIBLE_DEVICES``, and what the call needs for artifacts."""
    limit: float | None = None
    """(ours) The longest the call may run, in seconds, however much it reports: the agent
    stops it then. The published agent ignores it; the engine stops such a call itself."""
    ram_mb: int | None = None
    """(ours) The most memory the call's processes may hold together, in MB (its
    ``resources.ram_mb``): the agent stops it past that. None: the worker's own RAM bounds
    it. The published agent ignores it."""
    until_job_end: bool = False
    """(ours) True: its ``limit`` is the worker's job end (its node set none), so the agent
    gives it notice before (``--notice-s``). The published agent ignores it."""
    container: ContainerRef | None = None
    """(ours) Run it in this container. Sent only to a worker that said it runs it."""
    threads: int | None = None
    """(ours) The threads the call was granted (its ``cpus``): the agent caps every
    library's pool to it (:data:`THREAD_VARIABLES` and the runner's own). The published
    agent is sent them in ``env`` instead, as its protocol says."""
    restored: ArtifactRef | None = None
    """(ours) The state the call's last attempt saved with ``fluksio.checkpoint``, which
    ``fluksio.restored()`` gives back."""

    _omit_at_default: ClassVar[frozenset[str]] = frozenset(
        {"limit", "ram_mb", "until_job_end", "container", "threads", "restored"}
    )


@dataclass(frozen=True, kw_only=True)
class CancelFrame:
    op: Literal["cancel"] = "cancel"
    call_id: str


ENGINE_FRAMES: dict[str, type] = {
    "welcome": WelcomeFrame,
    "refused": RefusedFrame,
    "run": RunFrame,
    "compile": RunFrame,
    "cancel": CancelFrame,
}
"""Each frame the engine sends, by its ``op``: the agent reads them all alike."""

EngineFrame = WelcomeFrame | RefusedFrame | RunFrame | CancelFrame
_OF_A_CALL = frozenset({RunFrame, CancelFrame})
"""The engine's frames about one call: each names it (``call_id``)."""


def from_engine(raw: object) -> EngineFrame | None:
    """A frame from the engine as its declared class (:func:`~.codec.decoded`); None for
    an op this agent does not know (a newer engine's additions are ignored, like unknown
    keys). A frame of the wrong shape is a :class:`ValueError` naming the call and field."""
    if not isinstance(raw, dict):
        raise ValueError("a frame must be a JSON object")
    op = raw.get("op")
    kind = ENGINE_FRAMES.get(op) if isinstance(op, str) else None
    if kind is None:
        return None
    call_id = raw.get("call_id")
    if kind in _OF_A_CALL and not (isinstance(call_id, str) and call_id):
        raise ValueError(f"a {op} frame without a call_id")
    frame: EngineFrame = decoded(kind, raw, f"call {call_id}" if call_id else f"the {op}")
    return frame
