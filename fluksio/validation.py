"""A pydantic validation error as the one sentence a person reads: the field, then why.

Every layer that validates what a person or a worker wrote (request bodies, frames,
``provisioners.json``) reports its first error through :func:`first_error`, so a
refusal always names the field the same way and a broken name always states the rule.
"""

from __future__ import annotations

from pydantic import ValidationError

from fluksio.names import NAME_RULE

__all__ = ["first_error", "one_sentence"]


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
