"""What a Python function must be to run as a node elsewhere, and the node it becomes.

A function travels as its source, so it must be one whose source means the same on
another machine: defined with ``def`` at a module's top level (not a lambda, not inside
another function, not a method), using no variable of an enclosing function. What it
reads from its module travels with it (:mod:`fluksio.client.travel`). Its arguments and
its result travel as JSON; bytes and files travel as artifacts. Each rule is checked
when the call is submitted, and said in one sentence, so that nothing that cannot travel
fails later on a worker.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from fluksio.client.errors import CannotSend
from fluksio.client.travel import Travelling, gather
from fluksio.wire.answers.resources import ArtifactRef
from fluksio.wire.flows import CODE_MAX_CHARS

__all__ = ["CannotSend", "as_json", "check_arguments", "flow_name", "node_code"]


def node_code(
    fn: Callable[..., Any], imports: Sequence[str] = (), *, chunked: bool = False
) -> Travelling:
    """The code of a node whose ``process(args, kwargs)`` calls ``fn(*args, **kwargs)``
    (``chunked``: ``fn(*each)`` for each argument list in ``args``, their results in a
    list), with what ``fn`` reads from its module (:mod:`fluksio.client.travel`)."""
    name = getattr(fn, "__name__", repr(fn))
    if not inspect.isfunction(fn):
        raise CannotSend(f"{name} is not a function defined with def; only those can be sent")
    if name == "<lambda>":
        raise CannotSend("a lambda cannot be sent: define the function with def at module level")
    if "<locals>" in fn.__qualname__ or "." in fn.__qualname__:
        raise CannotSend(
            f"{name} is defined inside {fn.__qualname__.rsplit('.', 1)[0]}; only a function"
            " defined at a module's top level can be sent"
        )
    call = (
        "    return [_fluksio_target(*each) for each in args]"
        if chunked
        else "    return _fluksio_target(*args, **kwargs)"
    )
    code = gather(fn, imports, ["def process(args, kwargs):", call])
    if len(code.source) > CODE_MAX_CHARS:
        raise CannotSend(
            f"{name} and what it reads from its module make {len(code.source):,} characters"
            f" of code, and a node's code is at most {CODE_MAX_CHARS:,}: pass large data as"
            " an argument, or as an artifact (client.put_artifact)"
        )
    return code


def flow_name(fn: Callable[..., Any], content: object) -> str:
    """A flow's name for ``fn`` with ``content``: the same content, the same flow."""
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
    return f"py.{fn.__name__[:40]}.{digest}"


def check_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse an argument that is not JSON, naming it."""
    for index, value in enumerate(args, 1):
        _check_json(value, f"argument {index} of {name}")
    for key, value in kwargs.items():
        _check_json(value, f"argument {key}= of {name}")


def as_json(value: object) -> object:
    """``json.dumps``'s ``default``: what the client's own methods return travels as the
    JSON it holds (an :class:`ArtifactRef` from ``put_artifact``, which the node reads
    with ``fluksio.load_artifact``); anything else is no JSON."""
    if isinstance(value, ArtifactRef):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _check_json(value: object, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False, default=as_json)
    except (TypeError, ValueError):
        kind = type(value).__name__
        raise CannotSend(
            f"{what} is not JSON (a {kind}): pass numbers, text, lists and dicts, and bytes"
            " or files as artifacts (client.put_artifact)"
        ) from None
