"""Behind a reverse proxy: who the client really is, and the address the world uses.

A TLS-terminating proxy (nginx, see ``docs/deploying.md``) connects from its own address,
so every request would seem to come from it: login throttling would slow everyone down
for one person's typos. ``--trusted-proxy`` names the proxies whose ``X-Forwarded-For``
and ``X-Forwarded-Proto`` the engine believes; from anyone else those headers are ignored
(a client could write them). The client is the rightmost address in ``X-Forwarded-For``
that is not itself a trusted proxy, so a client cannot prepend a forged one.

``--public-url`` is the engine as workers and browsers reach it (``https://fluksio.example.com``):
the Workers screen's attach command uses it, and workers are told where artifacts are.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

__all__ = ["Network", "forwarded_middleware", "parse_public_url", "parse_trusted_proxies"]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def parse_trusted_proxies(values: Sequence[str]) -> tuple[Network, ...]:
    """Addresses or networks (``127.0.0.1``, ``10.0.0.0/8``); ValueError names a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network") from None
    return tuple(networks)


def parse_public_url(value: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing slash; ValueError says why."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r} must not have a query or fragment")
    path = parts.path.rstrip("/").removesuffix("/api/v1")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _trusted(address: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def client_address(forwarded_for: Sequence[str], proxies: tuple[Network, ...]) -> str | None:
    """The rightmost address of ``X-Forwarded-For`` that is not a trusted proxy."""
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return None  # garbage where an address should be: believe nothing
    return hops[0] if hops else None


def forwarded_middleware(
    proxies: tuple[Network, ...],
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Requests from a trusted proxy carry the client's address and scheme as it saw them."""

    @web.middleware
    async def forwarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.remote
        if peer is not None and _trusted(peer, proxies):
            client = client_address(request.headers.getall("X-Forwarded-For", []), proxies)
            scheme = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
            if client is not None or scheme in ("http", "https"):
                request = request.clone(
                    remote=client or peer,
                    scheme=scheme if scheme in ("http", "https") else request.scheme,
                )
        return await handler(request)

    return forwarded
