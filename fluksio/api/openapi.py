"""The engine's OpenAPI 3.1 description, built from its routes' declarations.

Each route is declared once (:mod:`fluksio.api.declare`): who may call it, the model its
body is read with, the model its answer is made from, its parameters and its errors. The
same declaration checks the caller, reads the body and serialises the answer, and
:func:`openapi_document` walks the app's router and puts those declarations together, with
JSON Schema from the same models (pydantic's own), so the description cannot drift from
what validates a request or shapes an answer. A route that was not declared is an error
at build time, which a test turns into a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from aiohttp import web
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from fluksio.api.declare import Auth, Operation, declared_route
from fluksio.wire.answers.resources import ErrorBody

__all__ = ["openapi_document"]

_SCHEMES: dict[str, dict[str, str]] = {
    "accessToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A user's access token, from POST /api/v1/login/access-token.",
    },
    "workerToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A worker token, minted by a superuser (POST /api/v1/workers/tokens).",
    },
    "artifactToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "The artifact token a node call gets ($FLUKSIO_ARTIFACT_TOKEN).",
    },
    "scrapeToken": {
        "type": "http",
        "scheme": "bearer",
        "description": "A scrape token (fks_...), minted by a superuser for Prometheus.",
    },
}
_SECURITY: dict[Auth, list[dict[str, list[str]]]] = {
    "none": [],
    "user": [{"accessToken": []}],
    "superuser": [{"accessToken": []}],
    "worker": [{"workerToken": []}],
    "artifact": [{"workerToken": []}, {"artifactToken": []}, {"accessToken": []}],
    "scrape": [{"scrapeToken": []}, {"accessToken": []}],
}
# Every token a scheme refuses counts against its client (429 after repeated refusals);
# an access token of a user who is not a superuser is a 403 wherever one is taken.
_AUTH_ERRORS: dict[Auth, tuple[int, ...]] = {
    "none": (),
    "user": (401, 429),
    "superuser": (401, 403, 429),
    "worker": (401, 429),
    "artifact": (401, 429),
    "scrape": (401, 403, 429),
}
_ERROR_TEXT = {
    400: "The request contradicts the engine's configuration.",
    401: "No credentials, or credentials that do not verify.",
    403: "Valid credentials that may not do this (not a superuser).",
    404: "No such thing.",
    409: "The request contradicts the current state.",
    413: "Larger than the operator allows.",
    422: "A field is malformed: `field` names it.",
    429: "Slowed down after repeated failures; see Retry-After.",
    507: "The engine's disk has no room; nothing was kept.",
}


def _operation_of(route: web.AbstractRoute) -> Operation:
    declared = declared_route(route.handler)
    if declared is None:
        where = f"{route.method} {route.resource.canonical if route.resource else '?'}"
        raise LookupError(f"{where} is not declared (fluksio.api.declare.Routes)")
    return declared.operation


def _routes(app: web.Application) -> list[tuple[str, str, Operation]]:
    """(path, method, operation) for every route but the HEAD twins aiohttp adds."""
    found = []
    for route in app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        found.append((route.resource.canonical, route.method.lower(), _operation_of(route)))
    return found


def openapi_document(app: web.Application) -> dict[str, Any]:
    routes = _routes(app)
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ErrorBody, "serialization")]
    for _path, _method, operation in routes:
        if operation.answer is not None:
            wanted.append((operation.answer, "serialization"))
        for model in (operation.body, operation.form):
            if model is not None:
                wanted.append((model, "validation"))
        wanted += [(model, "serialization") for model in operation.events.values()]
    refs, definitions = models_json_schema(
        list(dict.fromkeys(wanted)), ref_template="#/components/schemas/{model}"
    )

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    paths: dict[str, dict[str, Any]] = {}
    for path, method, operation in routes:
        paths.setdefault(path, {})[method] = _path_item(method, path, operation, ref)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Fluksio engine",
            "version": version("fluksio"),
            "description": "One engine, many workers: node code runs where the hardware "
            "lives. See docs/operating.md.",
        },
        "servers": [{"url": "/"}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": _SCHEMES,
        },
    }


def _path_item(
    method: str,
    path: str,
    operation: Operation,
    ref: Callable[[type[BaseModel], JsonSchemaMode], Any],
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": _operation_id(method, path),
        "security": _SECURITY[operation.auth],
    }
    if operation.auth in ("user", "superuser"):
        # (ours) Which role a user's access token needs: any user, or a superuser.
        item["x-fluksio-role"] = operation.auth
    if operation.description:
        item["description"] = operation.description
    params = _parameters(path, operation)
    if params:
        item["parameters"] = params
    body = _request_body(operation, ref)
    if body is not None:
        item["requestBody"] = body
    item["responses"] = _responses(method, operation, ref)
    return item


def _parameters(path: str, operation: Operation) -> list[dict[str, Any]]:
    """The operation's declared parameters, after the path's names it does not describe."""
    given = {param.name for param in operation.params if param.where == "path"}
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _path_names(path)
        if name not in given
    ]
    for param in operation.params:
        entry: dict[str, Any] = {
            "name": param.name,
            "in": param.where,
            "description": param.description,
            "schema": param.schema,
        }
        if param.required or param.where == "path":
            entry["required"] = True
        params.append(entry)
    return params


def _request_body(
    operation: Operation, ref: Callable[[type[BaseModel], JsonSchemaMode], Any]
) -> dict[str, Any] | None:
    if operation.body is not None:
        content = {"application/json": {"schema": ref(operation.body, "validation")}}
    elif operation.form is not None:
        form_schema = ref(operation.form, "validation")
        content = {"application/x-www-form-urlencoded": {"schema": form_schema}}
    elif operation.raw_body is not None:
        content = {operation.raw_body: {"schema": {"type": "string", "format": "binary"}}}
    else:
        return None
    return {"required": True, "content": content}


def _responses(
    method: str, operation: Operation, ref: Callable[[type[BaseModel], JsonSchemaMode], Any]
) -> dict[str, Any]:
    answers: dict[str, Any] = {str(operation.status): _answer(operation, ref)}
    for status, text in operation.answers.items():
        answers[str(status)] = {"description": text}
    error_schema = {"application/json": {"schema": ref(ErrorBody, "serialization")}}
    errors = {*_AUTH_ERRORS[operation.auth], *operation.errors}
    if method != "get" and operation.auth != "none":
        errors.add(507)  # a change the database had no room for is refused whole
    for status in sorted(errors):
        answers[str(status)] = {"description": _ERROR_TEXT[status], "content": error_schema}
    return answers


def _answer(operation: Operation, ref: Callable[[type[BaseModel], JsonSchemaMode], Any]) -> Any:
    if operation.answer is None:
        if operation.media == "none":
            return {"description": operation.summary}
        kind = "object" if operation.media == "application/json" else "string"
        media: dict[str, Any] = {"schema": {"type": kind}}
        if operation.events:
            media["x-events"] = {
                name: ref(model, "serialization") for name, model in operation.events.items()
            }
        return {"description": operation.summary, "content": {operation.media: media}}
    schema = ref(operation.answer, "serialization")
    if operation.many:
        schema = {"type": "array", "items": schema}
    return {"description": operation.summary, "content": {operation.media: {"schema": schema}}}


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


def _operation_id(method: str, path: str) -> str:
    """``get_runs_run_id`` for ``GET /api/v1/runs/{run_id}``: unique, as OpenAPI wants."""
    words = [p.strip("{}").replace(".", "_").replace("-", "_") for p in path.split("/") if p]
    # Outside the API: the screen's pages and /metrics (``get_site_workers``, the page).
    words = words[2:] if words[:2] == ["api", "v1"] else ["site", *words]
    return "_".join([method, *words])
