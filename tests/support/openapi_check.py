"""Every answer an in-process engine gives, checked against its own OpenAPI document.

:func:`check_answers` puts a middleware outside all of the engine's own: each answer's
status must be one the document gives its route, its media type the one it declares,
and a JSON body must validate against the schema for that status. An answer that does not
is replaced by a ``500`` whose ``detail`` says what differs, so the test that caused it
fails on the spot with the reason. A streamed answer (the event feed, the attach socket)
is checked as it starts, and what differs is kept in :attr:`AnswerCheck.streamed_problems`.

The routes and statuses seen are kept, so a test can prove that every route answered.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from openapi_schema_validator import OAS31Validator

from fluksio.api.openapi import openapi_document

__all__ = ["AnswerCheck", "check_answers"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


_DOCUMENTS: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
"""Each set of routes' document, made once per test process: every in-process engine of
the same routes has the same one (making it cost a tenth of a second a test)."""


def _routes(app: web.Application) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted((r.method, r.resource.canonical) for r in app.router.routes() if r.resource)
    )


class AnswerCheck:
    def __init__(self) -> None:
        self.seen: set[tuple[str, str, int]] = set()
        """(method, path as the document names it, status) of every answer checked."""
        self.streamed_problems: list[str] = []
        self._document: dict[str, Any] | None = None
        self._validators: dict[tuple[str, str, int], OAS31Validator] = {}

    def document(self, app: web.Application) -> dict[str, Any]:
        if self._document is None:
            routes = _routes(app)
            if routes not in _DOCUMENTS:
                _DOCUMENTS[routes] = openapi_document(app)
            self._document = _DOCUMENTS[routes]
        return self._document

    def problem(self, request: web.Request, response: web.StreamResponse) -> str | None:
        """What in ``response`` the document does not allow, or None."""
        route = request.match_info.route
        if route.resource is None:
            return None  # no route matched: aiohttp's own 404/405
        path = route.resource.canonical
        method = "get" if request.method == "HEAD" else request.method.lower()
        operation = self.document(request.app)["paths"][path][method]
        status = response.status
        self.seen.add((method, path, status))
        answer = operation["responses"].get(str(status))
        if answer is None:
            return f"{method.upper()} {path} answered {status}, which it does not document"
        content = answer.get("content")
        if content is None or status in (101, 304) or request.method == "HEAD":
            return None
        return self._body_problem(request, response, (method, path, status), content)

    def _body_problem(
        self,
        request: web.Request,
        response: web.StreamResponse,
        key: tuple[str, str, int],
        content: dict[str, Any],
    ) -> str | None:
        where = f"{key[0].upper()} {key[1]} {key[2]}"
        media = response.content_type
        declared = next((m for m in content if _matches(m, media)), None)
        if declared is None:
            return f"{where} is {media}, documented as {list(content)}"
        if media != "application/json" or not isinstance(response, web.Response):
            return None
        body = json.loads(response.body) if isinstance(response.body, bytes) else None
        validator = self._validators.get(key)
        if validator is None:
            components = self.document(request.app)["components"]
            validator = OAS31Validator({**content[declared]["schema"], "components": components})
            self._validators[key] = validator
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(body)]
        return f"{where} does not match its schema: {errors[:3]}" if errors else None


def _matches(declared: str, media: str) -> bool:
    kind, _, sub = declared.partition("/")
    return declared == media or (sub == "*" and media.startswith(f"{kind}/"))


def check_answers(app: web.Application) -> AnswerCheck:
    """Check every answer ``app`` gives from now on (call before it starts)."""
    check = AnswerCheck()

    @web.middleware
    async def checked(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as raised:  # a redirect, or aiohttp's own refusal
            problem = check.problem(request, raised)
            if problem is None:
                raise
            return web.json_response({"detail": f"OpenAPI check: {problem}"}, status=500)
        problem = check.problem(request, response)
        if problem is None:
            return response
        return web.json_response({"detail": f"OpenAPI check: {problem}"}, status=500)

    async def streamed(request: web.Request, response: web.StreamResponse) -> None:
        if not isinstance(response, web.Response):
            problem = check.problem(request, response)
            if problem is not None:
                check.streamed_problems.append(problem)

    app.middlewares.insert(0, checked)
    app.on_response_prepare.append(streamed)
    return check
