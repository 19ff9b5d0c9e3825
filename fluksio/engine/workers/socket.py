"""A worker's WebSocket, with every frame counted both ways, here and nowhere else.

The attach handler wraps the socket as soon as it is open, so the hello, a refusal, the
welcome, every call, cancel, ping and pong, and every frame the worker sends are counted
by the one object every path goes through (``fluksio_websocket_frames_total``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import WSMessage, web

__all__ = ["CountedSocket", "FrameCounts"]


@dataclass
class FrameCounts:
    """WebSocket frames received from and sent to workers (pings included)."""

    received: int = 0
    sent: int = 0
    passed_over: int = 0
    """Of those received, frames over 1 MiB passed over as they arrived, never held: not
    a call's awaited answer."""


class CountedSocket:
    """A worker's open WebSocket; ``counts`` (the registry's, shared by every worker) is
    told of each frame that goes through it."""

    def __init__(self, ws: web.WebSocketResponse, counts: FrameCounts) -> None:
        self._ws = ws
        self.counts = counts

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def receive(self, timeout: float | None = None) -> WSMessage:
        message = await self._ws.receive(timeout=timeout)
        self.counts.received += 1
        return message

    async def __aiter__(self) -> AsyncIterator[WSMessage]:
        async for message in self._ws:
            self.counts.received += 1
            yield message

    async def send_str(self, text: str) -> None:
        self.counts.sent += 1
        await self._ws.send_str(text)

    async def ping(self) -> None:
        self.counts.sent += 1
        await self._ws.ping()

    async def pong(self, data: bytes) -> None:
        self.counts.sent += 1
        await self._ws.pong(data)

    async def close(self, *, code: int, message: bytes) -> None:
        await self._ws.close(code=code, message=message)
