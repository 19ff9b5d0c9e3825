"""Fluksio from Python: ``Client``, the engine's API, typed.

    from fluksio.client import Client

    client = Client("https://engine.example:8443", token=os.environ["FLUKSIO_TOKEN"])
    run = client.start_run("nightly", {"day": "2026-12-04"})
    print(client.wait_run(run.id).state)

    with local() as client:  # an engine of one's own, for a laptop or a notebook
        ...

    async with AsyncClient(url, token=token) as client:  # the same, awaited
        run = await client.start_run("nightly")

``fluksio`` is a namespace package that the engine's distribution and the worker's
(``fluksio-worker``) share, so the client lives at ``fluksio.client``, not at the top.
See docs/python.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fluksio.client.bounds import Bounds
from fluksio.client.errors import CannotSend, ClientError, EngineRefused, Redirected, Unreachable
from fluksio.client.sse import ReceivedEvent

if TYPE_CHECKING:
    from fluksio.client.async_client import AsyncClient
    from fluksio.client.client import Client
    from fluksio.client.embedded import local
    from fluksio.client.executor import CallFuture, RemoteError

__all__ = [
    "AsyncClient",
    "Bounds",
    "CallFuture",
    "CannotSend",
    "Client",
    "ClientError",
    "EngineRefused",
    "ReceivedEvent",
    "Redirected",
    "RemoteError",
    "Unreachable",
    "local",
]
_LAZY = {
    "AsyncClient": "fluksio.client.async_client",
    "Client": "fluksio.client.client",
    "local": "fluksio.client.embedded",
    "CallFuture": "fluksio.client.executor",
    "RemoteError": "fluksio.client.executor",
}


def __getattr__(name: str) -> object:
    # Loaded when first asked for: the typed client brings the answers' models (pydantic),
    # local() the whole engine; a command that only reports an error needs neither.
    if name in _LAZY:
        found: object = getattr(importlib.import_module(_LAZY[name]), name)
        return found
    raise AttributeError(f"module 'fluksio.client' has no attribute {name!r}")
