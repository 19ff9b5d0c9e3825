"""Errors the engine's HTTP layer answers with; mapped to status codes in one table."""

from __future__ import annotations

from fluksio.errors import FluksioError

__all__ = [
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "NotAuthenticated",
    "NotFound",
    "StorageFull",
    "TooLarge",
    "TooManyAttempts",
]


class NotAuthenticated(FluksioError):
    """No credentials, or credentials that do not verify (401)."""


class Forbidden(FluksioError):
    """Valid credentials that may not do this (403)."""


class NotFound(FluksioError):
    """The named thing does not exist (404)."""


class Conflict(FluksioError):
    """The request contradicts the current state (409)."""


class InvalidInput(FluksioError):
    """A request field is malformed (422); ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TooManyAttempts(FluksioError):
    """Slowed down after repeated failures (429); retry after ``retry_after`` seconds."""

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class TooLarge(InvalidInput):
    """A body over the limit the operator set (413); ``field`` names it."""


class StorageFull(FluksioError):
    """The engine's disk (or database) has no room left; nothing was kept (507)."""
