"""``--connect-to``: the attach URL's host and port reached at another address.

A resolver that answers the URL's host and port with the address ``--connect-to`` names
and every other name as usual. aiohttp still hands the TLS handshake the URL's host, so
the engine's certificate is verified against the engine's own name.
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from fluksio.agent.urls import Route

__all__ = ["RoutingResolver"]


class RoutingResolver(AbstractResolver):
    def __init__(self, route: Route) -> None:
        self._route = route
        self._resolver = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if not self._route.applies(host, port):
            return await self._resolver.resolve(host, port, family)
        found = await self._resolver.resolve(self._route.to_host, self._route.to_port, family)
        return [{**answer, "hostname": host} for answer in found]

    async def close(self) -> None:
        await self._resolver.close()
