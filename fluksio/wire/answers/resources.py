"""Secrets (never their values), artifacts, the engine's health, a delete's answer, and
every refusal's body."""

from __future__ import annotations

from datetime import datetime

from fluksio.wire.answers.base import Answer


class SecretBody(Answer):
    """A secret as the API shows it: never its value."""

    name: str
    labels: list[str]
    created_at: datetime
    updated_at: datetime


class ArtifactRef(Answer):
    """A stored artifact: what a result carries to refer to it."""

    digest: str
    """``sha256:<hex>`` of the bytes the engine received."""
    size: int
    media_type: str
    name: str


class Health(Answer):
    status: str = "ok"
    version: str
    public_url: str | None
    """The engine as the world reaches it (``--public-url``), or null: as dialled."""


class Deleted(Answer):
    """The answer to a delete: the name of what is gone."""

    deleted: str


class ErrorBody(Answer):
    """Every refusal: one sentence, and (for bad input, 422) the field it names."""

    detail: str
    field: str | None = None
