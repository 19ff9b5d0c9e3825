"""Reading request bodies into pydantic models, with errors that name the field."""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from fluksio.errors import InvalidInput
from fluksio.names import NAME_RULE, is_name
from fluksio.validation import first_error, parse_json

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
