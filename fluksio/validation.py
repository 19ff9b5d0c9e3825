"""A pydantic validation error as the one sentence a person reads: the field, then why.

Every layer that validates what a person or a worker wrote (request bodies, frames,
``provisioners.json``) reports its first error through :func:`first_error`, so a
refusal always names the field the same way and a broken name always states the rule.
JSON text from a client or a worker is read by :func:`parse_json`, which says in a
sentence why it is not usable.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from fluksio.names import NAME_RULE

__all__ = ["first_error", "one_sentence", "parse_json"]


def first_error(error: ValidationError, *, whole: str = "body") -> tuple[str, str]:
    """(field, message) of the first error; ``whole`` names the input when no field does."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or whole
    message = NAME_RULE if first["type"] == "string_pattern_mismatch" else first["msg"]
    return field, message


def one_sentence(error: ValidationError, *, whole: str = "body") -> str:
    """``field: message`` for the first error."""
    field, message = first_error(error, whole=whole)
    return f"{field}: {message}"


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
