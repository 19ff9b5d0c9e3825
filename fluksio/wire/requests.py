"""Request bodies shared by several routes, validated with pydantic.

Names and labels follow the one rule of :mod:`fluksio.names`. A token carries at most 32
labels, duplicates folded (first occurrence kept). Response bodies are declared beside
the routes that serve them (``routes/runs.py``, ``routes/workers.py``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from fluksio.names import Name

__all__ = ["Label", "Name", "PersonalTokenRequest", "ScrapeTokenRequest", "WorkerTokenRequest"]

MAX_LABELS = 32

Label = Name


def _fold_duplicates(labels: list[str]) -> list[str]:
    return list(dict.fromkeys(labels))


class WorkerTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: Name
    labels: Annotated[
        list[Label], Field(max_length=MAX_LABELS), AfterValidator(_fold_duplicates)
    ] = Field(default_factory=list)


class ScrapeTokenRequest(BaseModel):
    """``POST /metrics/tokens``: a name for the scrape token (who scrapes with it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Name


class PersonalTokenRequest(BaseModel):
    """``POST /tokens``: a name for the token (what script holds it) and how many days it
    lasts (at most a year)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Name
    days: int = Field(default=90, ge=1, le=365)
