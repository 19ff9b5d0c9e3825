"""Request and response bodies, validated with pydantic; names and labels defined once.

Names (of workers, users) and labels: 1 to 63 characters of ASCII letters, digits, ``.``,
``_`` and ``-``, starting with a letter or digit. Labels are case-sensitive; a token
carries at most 32, duplicates folded (first occurrence kept).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

__all__ = ["LABEL_PATTERN", "NAME_PATTERN", "Label", "Name", "WorkerTokenRequest"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
LABEL_PATTERN = NAME_PATTERN
MAX_LABELS = 32

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Label = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]


def _fold_duplicates(labels: list[str]) -> list[str]:
    return list(dict.fromkeys(labels))


class WorkerTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    labels: Annotated[
        list[Label], Field(max_length=MAX_LABELS), AfterValidator(_fold_duplicates)
    ] = Field(default_factory=list)
