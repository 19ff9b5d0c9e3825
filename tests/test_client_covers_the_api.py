"""Every route and its client method held together, so that neither drifts from the other.

Each request the client makes (each method of ``fluksio.client``'s operations, the login
form, waiting for a run, the live feed) is a route the engine documents: its method, its
path, query names the route takes, and the model it reads the answer with is the one the
route's declaration names. And every documented route is reached by the client, or named
below with who else calls it. Before, a route and its client method were written twice
with nothing between them (the client had no method for secrets at all).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, RootModel

import fluksio.wire.answers as answers_package
from fluksio.api.app import create_app
from fluksio.api.openapi import openapi_document
from fluksio.client.absence import Absence, FeedPosition
from fluksio.client.operations import (
    Operations,
    login_form,
    run_end,
)
from fluksio.client.request import Operation, Request
from fluksio.engine.settings import EngineSettings

OUTSIDE_THE_CLIENT = {
    ("GET", "/"): "the browser's: the Workers screen",
    ("GET", "/workers"): "the browser's: the Workers screen",
    ("GET", "/static/{name}"): "the browser's: the Workers screen's files",
    ("GET", "/api/v1/openapi.json"): "the tools that read the API's description",
    ("GET", "/api/v1/workers/attach"): "the agent's WebSocket",
    ("GET", "/api/v1/workers/tokens/self"): "the agent's, to say why its token is refused",
    ("GET", "/api/v1/workers/runtime"): "a host's that copies the runner",
    ("GET", "/api/v1/workers/agent.py"): "a host's that copies the agent",
    ("GET", "/metrics"): "Prometheus's",
    ("GET", "/api/v1/healthz/live"): "a balancer's or a service manager's health check",
    ("GET", "/api/v1/healthz/ready"): "a balancer's health check",
}
"""The routes the client does not call, and whose they are."""

_SAMPLES = {
    "int": 5,
    "bool": True,
    "str": "x",
    "list[int]": [1],
    "list[str]": ["x"],
    "dict[str, object]": {},
    "datetime": datetime(2026, 12, 1, tzinfo=UTC),
    "bytes | Path": b"x",
}
"""A value for each parameter type an operation takes: every parameter is given one, so
every query name it can send is sent."""


def _sample(annotation: str) -> Any:
    if annotation.startswith("Sequence[NodeSpec"):
        return [{"id": "n", "code": "def process():\n    return 1\n"}]
    return _SAMPLES[annotation.removesuffix(" | None")]


def _requests() -> dict[str, Request[Any]]:
    made: dict[str, Request[Any]] = {}
    for name, member in vars(Operations).items():
        if isinstance(member, Operation):
            parameters = inspect.signature(member.build).parameters.values()
            given = {p.name: _sample(str(p.annotation)) for p in parameters}
            made[name] = member.build(**given)
    made["login"] = login_form("someone", "secret")
    made["wait_run"] = next(run_end("r1", timeout=30))
    feed = FeedPosition("r1", None, None, Absence(60))
    made["feed"] = Request("GET", feed.path, lambda raw: raw)
    return made


def _model_named(name: str) -> type[BaseModel]:
    for module in _answer_modules():
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    raise LookupError(f"no answer model {name} in fluksio.wire.answers")


def _answer_modules() -> list[types.ModuleType]:
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415

    return [
        importlib.import_module(f"fluksio.wire.answers.{info.name}")
        for info in pkgutil.iter_modules(answers_package.__path__)
    ]


def _said(shape: Any) -> str:
    """A model (or a list of one, or a union) as one comparable text."""
    if shape is None:
        return "not JSON"
    if isinstance(shape, type) and issubclass(shape, RootModel):
        return _said(shape.model_fields["root"].annotation)
    if isinstance(shape, type):
        return shape.__name__
    if typing.get_origin(shape) is list:
        (item,) = typing.get_args(shape)
        return f"list[{_said(item)}]"
    if typing.get_origin(shape) in (types.UnionType, typing.Union):
        return " | ".join(sorted(_said(part) for part in typing.get_args(shape)))
    raise TypeError(f"an answer read as {shape!r}")


def _documented(schema: dict[str, Any] | None) -> str:
    if schema is None:
        return "not JSON"
    if "$ref" in schema:
        return _said(_model_named(schema["$ref"].rsplit("/", 1)[1]))
    if schema.get("type") == "array":
        return f"list[{_documented(schema['items'])}]"
    if "anyOf" in schema:
        return " | ".join(sorted(_documented(part) for part in schema["anyOf"]))
    return str(schema)


def _answer_schema(operation: dict[str, Any]) -> dict[str, Any] | None:
    for status, answer in operation["responses"].items():
        content = answer.get("content", {})
        if status.startswith("2") and "application/json" in content:
            schema: dict[str, Any] = content["application/json"]["schema"]
            return schema
    return None


def _route(document: dict[str, Any], method: str, path: str) -> tuple[str, dict[str, Any]]:
    for template, operations in document["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        if re.fullmatch(pattern, path) and method.lower() in operations:
            operation: dict[str, Any] = operations[method.lower()]
            return template, operation
    raise AssertionError(f"{method} {path} is no route the engine documents")


def test_each_client_request_is_a_documented_route_read_with_its_declared_model(
    tmp_path: Path,
) -> None:
    document = openapi_document(create_app(EngineSettings(data_dir=tmp_path / "data")))
    reached = set()
    for name, request in _requests().items():
        path, _, query = request.target.partition("?")
        template, operation = _route(document, request.method, "/api/v1" + path)
        reached.add((request.method, template))
        taken = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        sent = set(urllib.parse.parse_qs(query))
        assert sent <= taken, f"{name} sends {sorted(sent - taken)}, not taken by {template}"
        if request.shape is not None or name == "feed":
            read, declared = _said(request.shape), _documented(_answer_schema(operation))
            assert read == declared, f"{name} reads {read}; {template} answers {declared}"
    documented = {
        (method.upper(), template)
        for template, operations in document["paths"].items()
        for method in operations
    }
    unreached = documented - reached - set(OUTSIDE_THE_CLIENT)
    assert not unreached, f"routes no client method reaches: {sorted(unreached)}"
    assert set(OUTSIDE_THE_CLIENT) <= documented, "a route named outside the client is gone"
