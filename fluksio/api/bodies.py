"""Reading request bodies into pydantic models, with errors that name the field."""

from __future__ import annotations

import json
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from fluksio.api.errors import InvalidInput
from fluksio.names import NAME_RULE, is_name
from fluksio.validation import first_error

__all__ = ["path_name", "read_json", "required_form_field"]


def path_name(request: web.Request, key: str = "name") -> str:
    """A name from the URL path, checked against the names rule (422 naming it)."""
    name = request.match_info[key]
    if not is_name(name):
        raise InvalidInput(key, NAME_RULE)
    return name


Model = TypeVar("Model", bound=BaseModel)


async def read_json(request: web.Request, model: type[Model]) -> Model:
    try:
        payload = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput("body", "is not valid JSON") from exc
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidInput(*first_error(exc)) from exc


def required_form_field(form: dict[str, str], name: str) -> str:
    value = form.get(name)
    if not value:
        raise InvalidInput(name, "is required")
    return value
