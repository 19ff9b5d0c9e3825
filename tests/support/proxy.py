"""A TCP relay on 127.0.0.1 that can stop carrying bytes without closing: a network pause.

Between an agent and the engine it stands for a network that goes quiet (a cable pulled,
a VPN that hangs, a NAT that drops packets): both ends keep their connection, nothing
arrives, and nobody is told. When it resumes, what was sent meanwhile is delivered, as
TCP's retransmissions would deliver it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["PausableProxy"]

T = TypeVar("T")


class PausableProxy:
    """Relays ``listen_host``:``port`` to 127.0.0.1:``target_port``, on a thread of its own."""

    def __init__(self, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self._target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._upward = asyncio.Event()
        self._upward.set()
        self.upward_bytes = 0
        """Bytes read from the clients so far, delivered or held."""
        self._writers: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server = self._call(asyncio.start_server(self._relay, listen_host, 0))
        self.port: int = self._server.sockets[0].getsockname()[1]

    def pause(self) -> None:
        """Nothing more crosses, either way, until :meth:`resume`; no connection closes."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def hold_upward(self) -> None:
        """What the clients send is read and held (a cut drops it; after a release it goes
        on with the next bytes); what comes to them still flows: a path failing one way."""
        self._loop.call_soon_threadsafe(self._upward.clear)

    def release_upward(self) -> None:
        self._loop.call_soon_threadsafe(self._upward.set)

    def cut(self) -> None:
        """Close every connection now, as a dropped link would end them; new ones are
        taken as before (unless paused)."""
        self._call(self._cut())

    async def _cut(self) -> None:
        for writer in list(self._writers):
            writer.close()

    def close(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return future.result(timeout=10)

    async def _close(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        # Relays still connecting or paused end here, not after their loop is gone.
        for relay in list(self._relays):
            relay.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            await self._flowing.wait()
            try:
                upstream = await asyncio.open_connection("127.0.0.1", self._target_port)
            except OSError:
                writer.close()
                return
            self._writers.update((writer, upstream[1]))
            await asyncio.gather(
                self._pump(reader, upstream[1], self._upward), self._pump(upstream[0], writer)
            )
        finally:
            self._relays.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        gate: asyncio.Event | None = None,
    ) -> None:
        held: list[bytes] = []
        try:
            while True:
                await self._flowing.wait()
                data = await reader.read(65536)
                if not data:
                    break
                if gate is not None:
                    self.upward_bytes += len(data)
                    held.append(data)
                    if not gate.is_set():
                        continue  # read on, as a network would take it, and hold it
                    data, held = b"".join(held), []
                await self._flowing.wait()  # read before the pause: held, not delivered
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self._writers.discard(writer)
