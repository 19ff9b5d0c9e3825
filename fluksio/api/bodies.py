"""Reading request bodies into pydantic models, with errors that name the field."""

from __future__ import annotations

import json
import re
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from fluksio.api.errors import InvalidInput
from fluksio.api.models import NAME_PATTERN

__all__ = ["path_name", "read_json", "required_form_field"]

_NAME_RULE = "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"


def path_name(request: web.Request, key: str = "name") -> str:
    """A name from the URL path, checked against the names rule (422 naming it)."""
    name = request.match_info[key]
    if not re.match(NAME_PATTERN, name):
        raise InvalidInput(key, _NAME_RULE)
    return name


Model = TypeVar("Model", bound=BaseModel)


def _field_name(location: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in location) or "body"


async def read_json(request: web.Request, model: type[Model]) -> Model:
    try:
        payload = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput("body", "is not valid JSON") from exc
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"]
        if first["type"] == "string_pattern_mismatch":
            message = _NAME_RULE
        raise InvalidInput(_field_name(tuple(first["loc"])), message) from exc


def required_form_field(form: dict[str, str], name: str) -> str:
    value = form.get(name)
    if not value:
        raise InvalidInput(name, "is required")
    return value
