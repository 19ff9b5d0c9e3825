"""What an engine knows is secret is blanked in every log line while it lives, and only
then: the values are the engine's, not the process's (before, one set for the whole
process, which grew with every engine a process ever ran and never let a value go)."""

from __future__ import annotations

import gc
import io
import logging
from collections.abc import Iterator

import pytest
import structlog

from fluksio.logs import LogSecrets, configure_logging, get_logger


@pytest.fixture
def logged() -> Iterator[io.StringIO]:
    """Log lines as ``fluksio serve`` writes them (JSON), into a buffer; put back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configured = structlog.is_configured()
    buffer = io.StringIO()
    configure_logging(level="info", stream=buffer)
    try:
        yield buffer
    finally:
        root.handlers[:], root.level = handlers, level
        if not configured:
            structlog.reset_defaults()


def test_an_engines_secrets_are_blanked_while_it_lives_and_let_go_with_it(
    logged: io.StringIO,
) -> None:
    log = get_logger("fluksio.test")
    mine = LogSecrets("correct-horse-battery", None, "abc")  # too short to tell: kept
    other = LogSecrets()
    other.add("staple-of-the-other-engine")
    log.info("said", words="correct-horse-battery and staple-of-the-other-engine, abc")
    logging.getLogger("aiohttp.access").info("GET /?p=correct-horse-battery")
    first = logged.getvalue()
    assert "correct-horse-battery" not in first and "staple-of" not in first
    assert first.count("[redacted]") == 3 and "abc" in first
    del other
    gc.collect()  # that engine is gone, and its values with it
    log.info("said", words="staple-of-the-other-engine")
    assert logged.getvalue()[len(first) :].count("staple-of-the-other-engine") == 1
    assert list(mine) == ["correct-horse-battery"]  # alive to the end, blanked throughout
