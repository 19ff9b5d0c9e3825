"""``--connect-to``: the attach URL's host and port reached at another address.

A connector that answers the URL's host and port with the address ``--connect-to`` names,
and every other host as usual. aiohttp still hands the TLS handshake the URL's host, so
the engine's certificate is verified against the engine's own name. It stands in front of
the resolver rather than being one, because aiohttp asks no resolver for an address
already written as one (``wss://10.0.0.5:8443/...``), and such a URL must be routed too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import TCPConnector
from aiohttp.abc import ResolveResult
from aiohttp.tracing import Trace

from fluksio.agent.urls import Route

__all__ = ["RoutedConnector"]


class RoutedConnector(TCPConnector):
    def __init__(self, route: Route, **options: Any) -> None:
        super().__init__(**options)
        self._route = route

    async def _resolve_host(
        self, host: str, port: int, traces: Sequence[Trace] | None = None
    ) -> list[ResolveResult]:
        if not self._route.applies(host, port):
            return await super()._resolve_host(host, port, traces)
        found = await super()._resolve_host(self._route.to_host, self._route.to_port, traces)
        return [{**answer, "hostname": host} for answer in found]
