"""Each route declared once: method, path, who may call it, its body, its answer.

A route module makes a :class:`Routes` and decorates its handlers::

    routes = Routes()

    @routes.put("/secrets/{name}", auth="superuser", body=SecretRequest, answer=SecretBody)
    async def _put(call: Call[SecretRequest]) -> SecretBody:
        "Create or replace a secret"
        ...

The handler's docstring is the route's summary, in the OpenAPI document too, so a reader
of the handler and of the document read the same sentence.

From that one declaration come the checks and the shapes around the handler:

- **who is asking**: the declared ``auth`` is enforced before the handler runs, and the
  caller it found is on the :class:`Call` (``call.superuser``, ``call.worker``);
- **the body**: read with the declared model (JSON or form), errors naming the field;
- **the answer**: the handler returns the model (a list of it for ``many``), or a
  :class:`View` for an answer tagged for ``If-None-Match``, and the declaration's status
  and serialisation are applied. An answer of another model than the declared one is a
  programming error (500), never a silent drift;
- **the OpenAPI entry** (:mod:`fluksio.api.openapi` reads the same declaration).

A route whose answer is not a model (bytes, a page, a stream, the WebSocket) declares its
``media`` and returns the aiohttp response itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from fluksio.api.appkeys import ENGINE
from fluksio.api.auth import authorize
from fluksio.api.bodies import read_json, required_form_field
from fluksio.api.responses import conditional_response, model_response
from fluksio.engine.front.callers import Caller, Scheme, User, WorkerIdentity
from fluksio.errors import InvalidInput
from fluksio.validation import first_error

__all__ = [
    "API_PREFIX",
    "EVENT_ID_HEADER",
    "Answered",
    "Auth",
    "Call",
    "Declared",
    "Operation",
    "Param",
    "Routes",
    "View",
    "declared_route",
]

API_PREFIX = "/api/v1"
EVENT_ID_HEADER = "X-Fluksio-Event-Id"
"""On the views the feed keeps current: the newest event they already include."""

Auth = Scheme
"""Who may call a route, as :data:`~fluksio.engine.front.callers.Scheme` says."""
Method = Literal["GET", "PUT", "POST", "DELETE"]
Body = TypeVar("Body")


@dataclass(frozen=True)
class Param:
    """A query, path or header parameter (path parameters are found in the route too)."""

    name: str
    description: str
    where: Literal["query", "path", "header"] = "query"
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False


@dataclass(frozen=True)
class Operation:
    """What one route is, as its declaration says and its OpenAPI entry shows."""

    summary: str
    auth: Auth
    answer: type[BaseModel] | None = None
    """The model the answer is made from (JSON), or None for another media type."""
    many: bool = False
    """The answer is a JSON array of ``answer``."""
    status: int = 200
    media: str = "application/json"
    body: type[BaseModel] | None = None
    """The model a JSON body is read with."""
    body_optional: bool = False
    """A request without a body is read as ``body()``, the model's defaults."""
    form: type[BaseModel] | None = None
    """The model an ``application/x-www-form-urlencoded`` body is read with."""
    raw_body: str | None = None
    """A body the handler reads as raw bytes of this media type (an artifact upload)."""
    view: bool = False
    """The answer is a :class:`View`: tagged, ``304`` while unchanged, with the feed's
    newest event id."""
    token_in_query: bool = False
    """The bearer token may come as ``?token=`` (the published agent's attach)."""
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = ()
    other_answers: dict[int, str] = field(default_factory=dict)
    description: str | None = None
    events: dict[str, type[BaseModel]] = field(default_factory=dict)
    """For a stream of server-sent events: each kind, and the model of its ``data``
    (described as ``x-events`` on the answer)."""

    @property
    def answers(self) -> dict[int, str]:
        """Every status a success may have, beside ``status``, with what it means."""
        found = dict(self.other_answers)
        if self.view:
            found[304] = "Unchanged since the ETag sent in If-None-Match."
        return found


@dataclass(frozen=True)
class Call(Generic[Body]):
    """One request to a declared route: its body read, its caller known."""

    request: web.Request
    body: Body
    caller: Caller

    @property
    def app(self) -> web.Application:
        return self.request.app

    @property
    def superuser(self) -> User:
        """The superuser asking (a route declared ``superuser``)."""
        if self.caller.user is None or not self.caller.user.is_superuser:
            raise RuntimeError("this route is not declared for a superuser")
        return self.caller.user

    @property
    def user(self) -> User:
        """The user asking (a route declared ``user`` or ``superuser``)."""
        if self.caller.user is None:
            raise RuntimeError("this route is not declared for a user")
        return self.caller.user

    @property
    def worker(self) -> WorkerIdentity:
        """The worker token presented (a route declared ``worker``)."""
        if self.caller.worker is None:
            raise RuntimeError("this route is not declared for a worker")
        return self.caller.worker


Model = BaseModel | Sequence[BaseModel]


@dataclass(frozen=True)
class Answered:
    """A model answer with another of the route's declared statuses (201 when created)."""

    body: Model
    status: int


@dataclass(frozen=True)
class View:
    """An answer the live feed keeps current: built only when the client's copy is stale.

    ``version`` (a few counters that change whenever the view does) tags it; without one,
    the tag is the hash of the built answer.
    """

    render: Callable[[], Model]
    version: str | None = None


Answer = BaseModel | Sequence[BaseModel] | Answered | View | web.StreamResponse
Handler = Callable[[Call[Any]], Awaitable[Answer]]


@dataclass(frozen=True)
class Declared:
    """A route as declared: what the router serves and OpenAPI describes."""

    method: Method
    path: str
    operation: Operation
    handler: Handler


def declared_route(handler: Any) -> Declared | None:
    """The declaration an aiohttp route's handler was made from, if it was."""
    found = getattr(handler, "__declared__", None)
    return found if isinstance(found, Declared) else None


class Routes:
    """One module's routes, each declared once with its handler."""

    def __init__(self, prefix: str = API_PREFIX) -> None:
        self.prefix = prefix
        self.declared: list[Declared] = []

    def get(self, path: str, **operation: Any) -> Callable[[Handler], Handler]:
        return self._declare("GET", path, operation)

    def put(self, path: str, **operation: Any) -> Callable[[Handler], Handler]:
        return self._declare("PUT", path, operation)

    def post(self, path: str, **operation: Any) -> Callable[[Handler], Handler]:
        return self._declare("POST", path, operation)

    def delete(self, path: str, **operation: Any) -> Callable[[Handler], Handler]:
        return self._declare("DELETE", path, operation)

    def _declare(
        self, method: Method, path: str, fields: dict[str, Any]
    ) -> Callable[[Handler], Handler]:
        def declare(handler: Handler) -> Handler:
            operation = Operation(summary=_summary(method, path, handler), **fields)
            _check(method, path, operation)
            self.declared.append(Declared(method, self.prefix + path, operation, handler))
            return handler

        return declare

    def route_defs(self) -> list[web.RouteDef]:
        # A GET gets its HEAD twin, as aiohttp's ``web.get`` gives it.
        return [
            web.get(declared.path, _endpoint(declared))
            if declared.method == "GET"
            else web.route(declared.method, declared.path, _endpoint(declared))
            for declared in self.declared
        ]


def _summary(method: Method, path: str, handler: Handler) -> str:
    """The first paragraph of the handler's docstring, on one line."""
    doc = inspect.getdoc(handler)
    if not doc:
        raise TypeError(f"{method} {path}: its handler's docstring is the route's summary")
    return " ".join(doc.split("\n\n")[0].split())


def _check(method: Method, path: str, operation: Operation) -> None:
    """Refuse at import a declaration that could not be kept."""
    where = f"{method} {path}"
    if operation.many and operation.answer is None:
        raise TypeError(f"{where}: many=True needs an answer model")
    if operation.answer is not None and operation.media != "application/json":
        raise TypeError(f"{where}: a model answer is JSON")
    if sum(x is not None for x in (operation.body, operation.form, operation.raw_body)) > 1:
        raise TypeError(f"{where}: one kind of body at most")
    if operation.body_optional and operation.body is None:
        raise TypeError(f"{where}: body_optional needs a body model")


def _endpoint(declared: Declared) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    operation = declared.operation

    async def endpoint(request: web.Request) -> web.StreamResponse:
        caller = authorize(request, operation.auth, allow_query=operation.token_in_query)
        body = await _read_body(request, operation)
        answer = await declared.handler(Call(request, body, caller))
        return _respond(request, declared, answer)

    endpoint.__declared__ = declared  # type: ignore[attr-defined]
    endpoint.__name__ = getattr(declared.handler, "__name__", "endpoint")
    return endpoint


async def _read_body(request: web.Request, operation: Operation) -> Any:
    if operation.body is not None:
        if operation.body_optional and not request.can_read_body:
            return operation.body()
        return await read_json(request, operation.body)
    if operation.form is not None:
        posted = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        fields = {name: required_form_field(posted, name) for name in operation.form.model_fields}
        try:
            return operation.form.model_validate(fields)
        except ValidationError as exc:
            raise InvalidInput(*first_error(exc)) from exc
    return None


def _respond(request: web.Request, declared: Declared, answer: Answer) -> web.StreamResponse:
    operation = declared.operation
    if isinstance(answer, web.StreamResponse):
        if operation.answer is not None:
            raise TypeError(f"{_where(declared)} answers a model, not a raw response")
        return answer
    if isinstance(answer, View):
        if not operation.view:
            raise TypeError(f"{_where(declared)} is not declared a view")
        view = answer

        def render() -> web.Response:
            return model_response(_checked(declared, view.render()), status=operation.status)

        response = conditional_response(request, render, view.version)
        response.headers[EVENT_ID_HEADER] = request.app[ENGINE].feed.last_id
        return response
    if isinstance(answer, Answered):
        if answer.status not in operation.answers:
            raise TypeError(f"{_where(declared)} does not declare status {answer.status}")
        return model_response(_checked(declared, answer.body), status=answer.status)
    return model_response(_checked(declared, answer), status=operation.status)


def _checked(declared: Declared, answer: Model) -> Model:
    """``answer``, when it is what the route declares it answers."""
    model, many = declared.operation.answer, declared.operation.many
    if model is None:
        raise TypeError(f"{_where(declared)} declares no answer model")
    if many != (not isinstance(answer, BaseModel)):
        raise TypeError(f"{_where(declared)} answers {'a list of ' if many else ''}{model}")
    items: Sequence[BaseModel] = [answer] if isinstance(answer, BaseModel) else answer
    if any(not isinstance(item, model) for item in items):
        raise TypeError(f"{_where(declared)} answers {model.__name__}")
    return answer


def _where(declared: Declared) -> str:
    return f"{declared.method} {declared.path}"
