"""One request to the engine as data, and the operations both clients are made of.

A :class:`Request` says what to send (method, path with its query, body) and how to read
the answer (``decode``); it does no I/O. An :class:`Operation` is a method written once
that builds a request: on :class:`~fluksio.client.client.Client` it sends it and returns
the answer, on :class:`~fluksio.client.async_client.AsyncClient` it returns an awaitable
of the same answer, so the two clients cannot drift apart (the pattern of sans-I/O
protocol libraries, like ``h11``: the protocol is data, each client only moves bytes).
"""

from __future__ import annotations

import functools
import hashlib
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar, overload

from pydantic import BaseModel, TypeAdapter, ValidationError

from fluksio.client.bounds import json_of
from fluksio.client.errors import ClientError

__all__ = ["Awaited", "Blocking", "Operation", "Request", "Steps", "bytes_checked", "json_request"]

Answer = TypeVar("Answer")
Params = ParamSpec("Params")
JSON = "application/json"

Steps = Generator["Request[Any]", Any, Answer]
"""An operation of several requests (waiting for a run's end): it yields each request,
is sent its answer, and returns the result; each client drives it with its own I/O."""


@dataclass(frozen=True)
class Request(Generic[Answer]):
    """What to send (``target`` is the path under ``/api/v1`` with its query) and how to
    read the answer's bytes."""

    method: str
    target: str
    decode: Callable[[bytes], Answer]
    data: bytes | None = None
    content_type: str | None = None
    large: bool = False
    """An artifact's bytes: bounded as those are, not as an answer (``Bounds``)."""
    shape: Any = None
    """The model its answer is read with (None: not JSON): what the route's declaration
    must name too (``tests/test_client_covers_the_api.py``)."""

    @property
    def line(self) -> tuple[str, str, bytes | None, str | None]:
        """What an HTTP shell's ``send`` takes: method, target, body and its type."""
        return self.method, self.target, self.data, self.content_type


def json_request(
    shape: Any,
    method: str,
    path: str,
    body: object | None = None,
    **query: Any,
) -> Request[Any]:
    """A request with ``body`` as JSON whose answer is read as ``shape`` (a model, or a
    list of one): an answer of another shape is one sentence, not a validation dump."""
    data = None if body is None else json.dumps(body).encode()
    validate = _validator(shape)

    def decode(raw: bytes) -> Any:
        found = json_of(raw or b"null", f"{method} {path}")
        try:
            return validate(found)
        except (ValidationError, RecursionError) as exc:
            problems = exc.error_count() if isinstance(exc, ValidationError) else 1
            raise ClientError(
                f"the engine answered {method} {path} in a shape this fluksio does not know"
                f" ({problems} problem(s)): are the engine and this client the same version?"
            ) from None

    target = with_query(path, query)
    return Request(method, target, decode, data, JSON if data else None, shape=shape)


def bytes_checked(digest: str) -> Callable[[bytes], bytes]:
    """An artifact's bytes as they came, once checked against ``digest``."""

    def decode(data: bytes) -> bytes:
        got = "sha256:" + hashlib.sha256(data).hexdigest()
        if got != digest:
            raise ClientError(f"artifact {digest} arrived as {got}: not the bytes stored")
        return data

    return decode


def with_query(path: str, query: Mapping[str, Any]) -> str:
    given = {k: v for k, v in query.items() if v is not None}
    return f"{path}?{urllib.parse.urlencode(given)}" if given else path


@functools.cache
def _validator(shape: Any) -> Callable[[Any], Any]:
    """``shape``'s validator, built once (a list's costs milliseconds to build)."""
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        return shape.model_validate
    return TypeAdapter(shape).validate_python


class Blocking:
    """A client whose methods return their answers (:class:`Client`): what an
    :class:`Operation` is on it."""


class Awaited:
    """A client whose methods are awaited (:class:`AsyncClient`)."""


class Operation(Generic[Params, Answer]):
    """A client method made of one request: ``build`` (the method's parameters, without
    ``self``) gives the request; the client sends it. Its docstring is the method's."""

    def __init__(self, build: Callable[Params, Request[Answer]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> Operation[Params, Answer]: ...
    @overload
    def __get__(self, client: Awaited, owner: type) -> Callable[Params, Awaitable[Answer]]: ...
    @overload
    def __get__(self, client: Blocking, owner: type) -> Callable[Params, Answer]: ...
    def __get__(self, client: Any, owner: type) -> Any:
        if client is None:
            return self
        build = self.build

        @functools.wraps(build)
        def sent(*args: Any, **kwargs: Any) -> Any:
            return client.send(build(*args, **kwargs))

        return sent
