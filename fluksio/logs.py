"""Structured logging for the engine and every layer in its process (the API, the
provisioners): readable on a terminal, JSON lines otherwise, never a secret.

Every line, ours and the libraries' (aiohttp's go through the same pipeline), passes the
redaction step, which blanks the values of keys that name credentials, anything shaped
like a JWT, and every value an engine alive in this process holds in its
:class:`LogSecrets` (its superuser's password, for instance) wherever it appears in the
line. The values are the engine's, not the process's: they go with it.
"""

from __future__ import annotations

import logging
import re
import sys
import weakref
from collections.abc import Iterator, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = ["LogSecrets", "configure_logging", "get_logger", "redact"]

_SENSITIVE_KEY = re.compile(r"pass(word)?|secret|token|authorization|cookie|credential", re.I)
_SAFE_KEYS = frozenset({"token_type", "jti", "event"})
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_REDACTED = "[redacted]"


class LogSecrets:
    """Values one engine knows are secret, blanked in every log line while it lives."""

    def __init__(self, *values: str | None) -> None:
        self._values: set[str] = set()
        for value in values:
            self.add(value)
        _LIVE.add(self)

    def add(self, value: str | None) -> None:
        """Blank ``value`` wherever it appears in any later log line (if long enough to
        be told from ordinary words)."""
        if value and len(value) >= 4:
            self._values.add(value)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._values))


_LIVE: weakref.WeakSet[LogSecrets] = weakref.WeakSet()
"""The secrets of every engine alive in this process (a log pipeline is the process's)."""


def _scrub(text: str) -> str:
    text = _JWT.sub(_REDACTED, text)
    for secrets in list(_LIVE):
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, _REDACTED)
    return text


def _scrub_value(value: Any) -> Any:
    if isinstance(value, str):
        return _scrub(value)
    if isinstance(value, dict):
        return {k: _scrub_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_value(v) for v in value]
    return value


def redact(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: blank credentials by key name and by shape."""
    for key, value in list(event_dict.items()):
        if key not in _SAFE_KEYS and value is not None and _SENSITIVE_KEY.search(key):
            event_dict[key] = _REDACTED
        else:
            event_dict[key] = _scrub_value(value)
    return event_dict


def configure_logging(*, level: str = "info", stream: TextIO | None = None) -> None:
    """Route structlog and the standard library through one redacting pipeline."""
    stream = stream or sys.stderr
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if stream.isatty()
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # asyncssh logs every channel at INFO: a poll each few seconds would flood the log.
    logging.getLogger("asyncssh").setLevel(max(logging.WARNING, root.level))


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
