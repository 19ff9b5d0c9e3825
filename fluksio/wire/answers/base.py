"""The base of every answer's model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Answer"]


class Answer(BaseModel):
    """A model of an answer. Its validator and serialiser are built when first used, not
    when the module is imported: a command that reads one kind of answer builds that one
    (``fluksio workers list`` starts faster by the forty-odd milliseconds the others cost)."""

    model_config = ConfigDict(defer_build=True)
