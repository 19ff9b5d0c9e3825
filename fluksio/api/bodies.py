"""Reading request bodies into pydantic models, with errors that name the field."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from fluksio.errors import InvalidInput
from fluksio.names import NAME_RULE, is_name
from fluksio.validation import first_error

__all__ = ["parse_json", "path_name", "read_json", "required_form_field"]


def path_name(request: web.Request, key: str = "name") -> str:
    """A name from the URL path, checked against the names rule (422 naming it)."""
    name = request.match_info[key]
    if not is_name(name):
        raise InvalidInput(key, NAME_RULE)
    return name


Model = TypeVar("Model", bound=BaseModel)


def parse_json(text: str | bytes) -> Any:
    """JSON from a client or a worker; ValueError with a sentence when it is not usable.

    Nesting deeper than the parser's recursion limit is refused like bad JSON, not left to
    surface as a server error.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError("is not valid JSON") from None


async def read_json(request: web.Request, model: type[Model]) -> Model:
    try:
        payload = parse_json(await request.read())
    except ValueError as exc:
        raise InvalidInput("body", str(exc)) from exc
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidInput(*first_error(exc)) from exc


def required_form_field(form: dict[str, str], name: str) -> str:
    value = form.get(name)
    if not value:
        raise InvalidInput(name, "is required")
    return value
