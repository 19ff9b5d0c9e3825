"""What a flow is: nodes, their dependencies and what they need, validated field by field.

``worker`` and ``worker_policy`` are canonical; ``device`` and ``device_policy`` are
accepted as aliases on input and never emitted. Every node's syntax is checked when the
flow is saved (the engine's ``check_flow``); its imports are not, since
a node bound to a worker may import what only that machine has.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fluksio.wire.requests import Label

__all__ = [
    "CODE_MAX_CHARS",
    "ITEMS_FROM_MAX",
    "ITEMS_INLINE_MAX",
    "ITEMS_MAX",
    "ContainerRuntime",
    "ContainerSpec",
    "FlowSpec",
    "ItemsCancelRequest",
    "NodeResources",
    "NodeSettings",
    "NodeSpec",
    "RetryKind",
    "RetryPolicy",
    "RunRequest",
    "SecretRequest",
]

CODE_MAX_CHARS = 1_000_000
"""A node's code is at most this long."""
ITEMS_MAX = 10_000_000
"""The most items one array node may have, inline and from artifacts together."""
ITEMS_INLINE_MAX = 10_000
"""The most items given inline (``items``); more come as artifacts (``items_from``)."""
ITEMS_FROM_MAX = 1_000
"""The most artifacts of items one array node may name."""
CANCEL_MOST = 10_000
"""The most items one request may cancel."""

LIMIT_MAX_S = 366 * 86400.0
"""A year and a day: beyond any batch walltime, and still a number a timer can hold."""

ArtifactDigest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]

NodeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
"""A node id is also the keyword its result is passed under downstream: an identifier."""


class NodeResources(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    cpus: int | None = Field(default=None, ge=0)
    gpus: int | None = Field(default=None, ge=0)
    ram_mb: int | None = Field(default=None, ge=0)


ContainerRuntime = Literal["podman", "apptainer", "docker"]
"""The container runtimes a worker may run calls with (its ``--containers``)."""

_IMAGE = re.compile(r"[A-Za-z0-9/][A-Za-z0-9._/:@+=-]{0,511}")


def _image_name(name: str) -> str:
    if not _IMAGE.fullmatch(name):
        raise ValueError(
            "an image is 1 to 512 letters, digits and . _ / : @ + = -, starting with a letter,"
            " a digit or / (it goes into the runtime's command line)"
        )
    # Past a scheme's "://" and a file's leading "/", every segment names a place: one that
    # is empty, "." or ".." is read by a runtime as another place than the text shows.
    path = name.split("://", 1)[-1].lstrip("/")
    strange = next((part for part in path.split("/") if part in ("", ".", "..")), None)
    if strange is not None:
        raise ValueError(
            f"an image holds no {repr(strange) if strange else 'empty'} segment between its"
            " '/' (a runtime reads it as another place than it names: give the path itself)"
        )
    return name


ImageName = Annotated[str, AfterValidator(_image_name)]
"""An image as its runtime names it: a reference (``registry.example/cuda:12.4``), or a
file the worker reads (``/images/tool.sif``, ``oci-archive:/images/tool.tar``). Never
starting with ``-``, nor holding a space: it goes into the runtime's argv."""


class ContainerSpec(BaseModel):
    """The container a node's calls run in."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    image: ImageName
    """The image: any with a ``python3`` (3.9 or later) runs a node; nothing of Fluksio's
    is needed inside. A worker runs it only if one of its ``--allow-image`` patterns
    matches."""
    runtime: ContainerRuntime | None = None
    """The runtime it must run under; None: whichever the worker runs."""


RetryKind = Literal["NodeError", "NodeTimeout", "NodeLimit", "WorkerGone"]
"""The failures an author may choose to retry."""


class RetryPolicy(BaseModel):
    """Failures of the chosen kinds run the node again, up to ``times`` more attempts,
    each after a wait that grows: ``backoff_s``, then times ``factor``, at most
    ``max_backoff_s``."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    on: list[RetryKind] = Field(min_length=1, max_length=4)
    """``NodeError`` (its code raised, or its process died), ``NodeTimeout`` (silent past
    its ``timeout``), ``NodeLimit`` (ran past its ``limit``, or to its job's end),
    ``WorkerGone`` (its worker was lost mid-call: it may then run twice)."""
    times: int = Field(ge=1, le=10)
    """How many attempts after the first, at most."""
    backoff_s: float = Field(default=1.0, ge=0, le=3600)
    """The wait before the first retry; 0: at once."""
    factor: float = Field(default=2.0, ge=1, le=10)
    """Each later wait is the one before times this."""
    max_backoff_s: float = Field(default=300.0, ge=0, le=86400)
    """No wait is longer than this."""

    def wait_before(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the first)."""
        return min(self.backoff_s * self.factor ** (retry - 1), self.max_backoff_s)


# Attribute docstrings are the fields' descriptions in the OpenAPI document.
_NODE_CONFIG = ConfigDict(
    extra="forbid", populate_by_name=True, strict=True, use_attribute_docstrings=True
)


class NodeSettings(BaseModel):
    """Everything a node is given but its id and its code: what the calls of an
    executor share (``client.executor(NodeSettings(worker="gpu"))``), checked as a flow's
    node is."""

    model_config = _NODE_CONFIG

    after: list[NodeId] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    worker: Label | None = Field(default=None, validation_alias=AliasChoices("worker", "device"))
    worker_policy: Literal["require", "prefer"] = Field(
        default="require", validation_alias=AliasChoices("worker_policy", "device_policy")
    )
    timeout: float = Field(default=0, ge=0, le=LIMIT_MAX_S)
    """Silence seconds: the node is stopped after this long without reporting anything
    (a result, an event, a log line); 0: never. It bounds silence, not duration."""
    limit: float | None = Field(default=None, gt=0, le=LIMIT_MAX_S)
    """The longest a call of this node may run, in seconds, however much it reports; it
    is stopped then. Also what places it on a batch job's worker: only where it fits
    before the job ends. None: no bound of its own; on a worker whose job ends, it runs
    until the job has the engine's walltime margin left."""
    resources: NodeResources = Field(default_factory=NodeResources)
    container: ContainerSpec | None = None
    """Run each call in this container, on a worker that allows its image; it needs a
    ``worker`` label (the engine runs no containers)."""
    retry_on_restart: bool = False
    """Re-run (rather than fail) this node when the engine restarts while it executes."""
    retries: int = Field(default=0, ge=0, le=10)
    """Run it again, up to this many times, when its worker is lost mid-call (it may then
    run twice: the first answer counts). Off by default. The same as ``retry`` with
    ``{"on": ["WorkerGone"], "times": N, "backoff_s": 0}``."""
    retry: RetryPolicy | None = None
    """Which failures run it again, how many times, and after what wait (instead of
    ``retries``, not beside it)."""
    max_checkpoints: int = Field(default=3, ge=0, le=100)
    """How many times a call is queued again, spending no retry, after a stop not of its
    doing (its batch job's end reached while it ran, it set no ``limit``; its worker told
    to stop, SIGTERM: a preemption, a cancelled job) or after its own
    ``fluksio.checkpoint``. Past them such a stop is a failure, retried as its ``retry``
    says (``NodeLimit``, ``WorkerGone``; a checkpoint never)."""
    items: list[dict[str, Any]] | None = Field(
        default=None, min_length=1, max_length=ITEMS_INLINE_MAX
    )
    """An array: the node runs once per item, each item's keys added to its parameters
    (over ``params``). Each item is a call of its own, with its own state, attempts and
    result, read by pages (``GET /runs/{id}/items``); nothing may be ``after`` an array."""
    items_from: list[ArtifactDigest] | None = Field(
        default=None, min_length=1, max_length=ITEMS_FROM_MAX
    )
    """An array whose items are in artifacts of JSON lines (one object per line, read in
    the order given): for more items than a request body holds."""

    @field_validator("retry")
    @classmethod
    def _one_way_to_retry(
        cls, retry: RetryPolicy | None, info: ValidationInfo
    ) -> RetryPolicy | None:
        retries = info.data.get("retries")
        if retries and retry is not None:
            raise ValueError(
                f'give "retry" or "retries", not both ("retries": {retries} is'
                f' "retry": {{"on": ["WorkerGone"], "times": {retries}, "backoff_s": 0}})'
            )
        return retry

    @field_validator("items", "items_from", mode="before")
    @classmethod
    def _items_within_bounds(cls, given: Any, info: ValidationInfo) -> Any:
        """A list past its bound is refused with the bound and what to do instead (the
        same bound is in the schema)."""
        if not isinstance(given, list):
            return given
        if info.field_name == "items" and len(given) > ITEMS_INLINE_MAX:
            raise ValueError(
                f"{len(given):,} items inline, over the {ITEMS_INLINE_MAX:,} a flow may hold:"
                ' give them as artifacts of JSON lines ("items_from")'
            )
        if info.field_name == "items_from" and len(given) > ITEMS_FROM_MAX:
            raise ValueError(
                f"{len(given):,} artifacts, over the {ITEMS_FROM_MAX:,} one array may name:"
                " put more items in each"
            )
        return given

    @field_validator("items_from")
    @classmethod
    def _items_one_way(cls, items_from: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if items_from is not None and info.data.get("items") is not None:
            raise ValueError('give "items" or "items_from", not both')
        return items_from

    @property
    def is_array(self) -> bool:
        return self.items is not None or self.items_from is not None

    @property
    def most_attempts(self) -> int:
        """How many attempts it may have, the first included."""
        policy = self.retry_policy()
        return 1 if policy is None else policy.times + 1

    def retry_policy(self) -> RetryPolicy | None:
        """How this node is retried, whichever way its author said it; None: never."""
        if self.retry is not None:
            return self.retry
        if self.retries:
            return RetryPolicy(on=["WorkerGone"], times=self.retries, backoff_s=0)
        return None

    @model_validator(mode="after")
    def _container_runs_on_a_worker(self) -> Self:
        if self.container is None:
            return self
        if self.worker is None:
            raise ValueError(
                "container: a node in a container runs on a worker, and the engine runs"
                ' none: give it a "worker" label'
            )
        if self.worker_policy == "prefer":
            raise ValueError(
                'container: "worker_policy": "prefer" would run it on the engine, which runs'
                ' no containers: leave it "require"'
            )
        return self

    @model_validator(mode="after")
    def _secret_references_are_well_formed(self) -> Self:
        for key, value in self.params.items():
            if not (isinstance(value, dict) and "$secret" in value):
                continue
            if set(value) != {"$secret"} or not isinstance(value["$secret"], str):
                raise ValueError(f'params.{key}: a secret reference is {{"$secret": "<name>"}}')
        return self


class _NodeName(BaseModel):
    model_config = _NODE_CONFIG

    id: NodeId
    code: Annotated[str, StringConstraints(min_length=1, max_length=CODE_MAX_CHARS)]


# A node of a flow: its id and code, then its settings (a subclass's fields come in the
# reverse order of its bases, so the document lists id and code first, as it always has).
# No docstring: the OpenAPI document gives this schema none.
class NodeSpec(NodeSettings, _NodeName):
    model_config = _NODE_CONFIG


class FlowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    nodes: list[NodeSpec] = Field(min_length=1, max_length=10_000)


class ItemsCancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    node: NodeId | None = None
    """The array node (when the run has more than one)."""
    items: list[Annotated[int, Field(ge=0)]] = Field(min_length=1, max_length=CANCEL_MOST)
    """The positions of the items to cancel."""

    @field_validator("items", mode="before")
    @classmethod
    def _within_bound(cls, given: Any) -> Any:
        if isinstance(given, list) and len(given) > CANCEL_MOST:
            raise ValueError(
                f"{len(given):,} positions, over the {CANCEL_MOST:,} one request may name:"
                " send the rest in another"
            )
        return given


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    params: dict[str, Any] = Field(default_factory=dict)


class SecretRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    value: Annotated[str, StringConstraints(min_length=1, max_length=65536)]
    labels: list[Label] = Field(default_factory=list, max_length=32)
