"""The one root of the errors Fluksio raises on purpose.

Every layer of the engine subclasses :class:`FluksioError`; the HTTP layer maps those
subclasses to status codes in one place (``fluksio.api.middlewares``) and the CLI turns
them into one sentence and exit code 2. ``detail`` is that sentence: written for the
person who has to act on it, and never containing a secret.

The refusals (:class:`NotFound`, :class:`InvalidInput`, ... ) are the engine's answers
to a request that cannot be served, each with the HTTP status it is answered with; they
are here, beside the root, because the engine raises them and the API answers with them.

The scheduler raises nothing (a request that does not fit is a decision, not an error)
and the agent, which imports nothing of the engine, has its own root,
:class:`fluksio.agent.errors.AgentError`.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Conflict",
    "FluksioError",
    "Forbidden",
    "InvalidInput",
    "NotAuthenticated",
    "NotFound",
    "StorageFull",
    "StoreAway",
    "TooLarge",
    "TooManyAttempts",
]


class FluksioError(Exception):
    """Base of every deliberate Fluksio error; ``detail`` is safe to show a user."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ConfigError(FluksioError):
    """Configuration (options, environment, data directory, files) cannot be used."""


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


class StoreAway(FluksioError):
    """The engine's database cannot be reached for now (503); nothing of the change was
    kept, and it may be tried again."""
