"""The one root of the errors Fluksio raises on purpose.

Every layer of the engine subclasses :class:`FluksioError`; the HTTP layer maps those
subclasses to status codes in one place (``fluksio.api.middlewares``) and the CLI turns
them into one sentence and exit code 2. ``detail`` is that sentence: written for the
person who has to act on it, and never containing a secret.

The scheduler raises nothing (a request that does not fit is a decision, not an error)
and the agent, which imports nothing of the engine, has its own root,
:class:`fluksio.agent.errors.AgentError`.
"""

from __future__ import annotations

__all__ = ["ConfigError", "FluksioError"]


class FluksioError(Exception):
    """Base of every deliberate Fluksio error; ``detail`` is safe to show a user."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class ConfigError(FluksioError):
    """Configuration (options, environment, data directory, files) cannot be used."""
