"""A call that waits for a slot has its inputs fetched meanwhile: the artifacts its
arguments name by reference come into this machine's cache while the call before it
runs, so that it starts with them there, instead of fetching one after another."""

from __future__ import annotations

import asyncio
import logging
import os

from fluksio.agent import runner
from fluksio.agent.protocol.frames import RunFrame

__all__ = ["Prefetches"]

log = logging.getLogger("fluksio.agent")


class Prefetches:
    """The fetches under way, one thread each (the cache's lock file keeps a call and
    its prefetch from fetching the same artifact twice)."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()

    def start(self, spec: RunFrame) -> None:
        """Fetch what ``spec`` names, in the background; a failure is the call's to meet
        (it fetches what is missing itself)."""
        digests = runner.named_digests(spec.kwargs)
        if not digests:
            return
        settings = {**os.environ, **spec.env}  # as the call will see its store
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(_quietly, spec.call_id, digests, settings)
        )
        self._running.add(task)
        task.add_done_callback(self._running.discard)


def _quietly(call_id: str, digests: list[str], settings: dict[str, str]) -> None:
    try:
        runner.prefetch_artifacts(digests, settings)
    except Exception as exc:  # the call fetches what is missing itself, and says why
        log.info("fetching the inputs of call %s ahead failed: %s", call_id, exc)
