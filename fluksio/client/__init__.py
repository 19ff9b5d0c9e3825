"""Fluksio from Python: ``Client``, the engine's API, typed.

    from fluksio.client import Client

    client = Client("https://engine.example:8443", token=os.environ["FLUKSIO_TOKEN"])
    run = client.start_run("nightly", {"day": "2026-12-04"})
    print(client.wait_run(run.id).state)

``fluksio`` is a namespace package that the engine's distribution and the worker's
(``fluksio-worker``) share, so the client lives at ``fluksio.client``, not at the top.
See docs/python.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from fluksio.client.http import ClientError, EngineRefused
from fluksio.client.sse import ReceivedEvent

if TYPE_CHECKING:
    from fluksio.client.client import Client

__all__ = ["Client", "ClientError", "EngineRefused", "ReceivedEvent"]


def __getattr__(name: str) -> object:
    # The typed client brings the answers' models (pydantic): loaded when first asked
    # for, so that a command which only reports an error need not pay for them.
    if name == "Client":
        client: object = importlib.import_module("fluksio.client.client").Client
        return client
    raise AttributeError(f"module 'fluksio.client' has no attribute {name!r}")
