"""What a flow is: nodes, their dependencies and what they need, validated field by field.

``worker`` and ``worker_policy`` are canonical; ``device`` and ``device_policy`` are
accepted as aliases on input and never emitted. Every node's syntax is checked when the
flow is saved (:func:`~fluksio.engine.runs.validation.check_flow`); its imports are not, since
a node bound to a worker may import what only that machine has.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from fluksio.engine.models import Label

__all__ = ["FlowSpec", "NodeResources", "NodeSpec", "RunRequest", "SecretRequest", "find_cycle"]

LIMIT_MAX_S = 366 * 86400.0
"""A year and a day: beyond any batch walltime, and still a number a timer can hold."""

NodeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]
"""A node id is also the keyword its result is passed under downstream: an identifier."""


class NodeResources(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    cpus: int | None = Field(default=None, ge=0)
    gpus: int | None = Field(default=None, ge=0)
    ram_mb: int | None = Field(default=None, ge=0)


class NodeSpec(BaseModel):
    # Attribute docstrings are the fields' descriptions in the OpenAPI document.
    model_config = ConfigDict(
        extra="forbid", populate_by_name=True, strict=True, use_attribute_docstrings=True
    )

    id: NodeId
    code: Annotated[str, StringConstraints(min_length=1, max_length=1_000_000)]
    after: list[NodeId] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    worker: Label | None = Field(default=None, validation_alias=AliasChoices("worker", "device"))
    worker_policy: Literal["require", "prefer"] = Field(
        default="require", validation_alias=AliasChoices("worker_policy", "device_policy")
    )
    timeout: float = Field(default=0, ge=0)
    """Silence seconds: the node is stopped after this long without reporting anything
    (a result, an event, a log line); 0: never. It bounds silence, not duration."""
    limit: float | None = Field(default=None, gt=0, le=LIMIT_MAX_S)
    """The longest a call of this node may run, in seconds, however much it reports; it
    is stopped then. Also what places it on a batch job's worker: only where it fits
    before the job ends. None: no bound, and never on a worker whose job ends."""
    resources: NodeResources = Field(default_factory=NodeResources)
    retry_on_restart: bool = False
    """Re-run (rather than fail) this node when the engine restarts while it executes."""
    retries: int = Field(default=0, ge=0, le=10)
    """Run it again, up to this many times, when its worker is lost mid-call (it may then
    run twice: the first answer counts). Off by default."""

    @model_validator(mode="after")
    def _secret_references_are_well_formed(self) -> NodeSpec:
        for key, value in self.params.items():
            if not (isinstance(value, dict) and "$secret" in value):
                continue
            if set(value) != {"$secret"} or not isinstance(value["$secret"], str):
                raise ValueError(f'params.{key}: a secret reference is {{"$secret": "<name>"}}')
        return self


class FlowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    nodes: list[NodeSpec] = Field(min_length=1, max_length=10_000)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    params: dict[str, Any] = Field(default_factory=dict)


class SecretRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    value: Annotated[str, StringConstraints(min_length=1, max_length=65536)]
    labels: list[Label] = Field(default_factory=list, max_length=32)


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a list of node ids (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dependency in edges.get(node, []):
            if state.get(dependency) == 1:
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state and (found := visit(dependency)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state and (found := visit(node)) is not None:
            return found
    return None
