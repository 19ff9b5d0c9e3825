"""What can go wrong talking to an engine, as exceptions a script can catch by kind."""

from __future__ import annotations

import json

from fluksio.errors import FluksioError

__all__ = ["CannotSend", "ClientError", "EngineRefused", "Redirected", "Unreachable", "refusal"]


class ClientError(FluksioError):
    """The engine could not be reached, or answered in a shape this client does not know."""


class Unreachable(ClientError):
    """The engine could not be reached, or the connection broke off (refused, reset, cut):
    it may be restarting, and asking again later may succeed. ``unsent``: the connection
    was refused, so the request never reached an engine, and sending it again cannot do
    it twice (a reset or a cut may have come after the engine did it)."""

    def __init__(self, message: str, *, unsent: bool = False) -> None:
        super().__init__(message)
        self.unsent = unsent


class EngineRefused(ClientError):
    """The engine answered with a refusal: ``status`` (its HTTP status) and
    ``engine_detail`` (its own sentence, which names the field at fault); ``detail`` is
    the whole sentence to show ("the engine refused: ...")."""

    def __init__(self, status: int, engine_detail: str) -> None:
        super().__init__(f"the engine refused: {engine_detail}")
        self.status = status
        self.engine_detail = engine_detail


class Redirected(ClientError):
    """The engine (or what answered in its place) redirected a request elsewhere: never
    followed, since the credential would go there too. Asking again changes nothing."""


class CannotSend(ClientError):
    """A function or an argument that cannot travel to a worker, and why (one sentence)."""


def refusal(status: int, body: bytes) -> EngineRefused:
    """A refusal's status and body as :class:`EngineRefused`."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError, RecursionError):
        detail = None
    return EngineRefused(status, str(detail) if detail else f"HTTP {status}")
