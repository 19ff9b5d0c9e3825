"""A TCP forwarder on 127.0.0.1 that holds every chunk ``one_way_ms`` each way, and, if
given, lets at most ``bandwidth_mbit`` through each way: a long link on loopback.

Each direction keeps its order: a chunk leaves when the link is free for it (its bytes at
the bandwidth, after the chunk before) and arrives ``one_way_ms`` later. Runs on a thread
of its own, so a benchmark's blocking calls go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

__all__ = ["DelayForwarder"]

CHUNK = 65536


class DelayForwarder:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port`` across a slow link."""

    def __init__(
        self, target_port: int, one_way_ms: float, bandwidth_mbit: float | None = None
    ) -> None:
        self._target_port = target_port
        self._delay_s = one_way_ms / 1000
        self._bytes_per_s = None if bandwidth_mbit is None else bandwidth_mbit * 1e6 / 8
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._tasks: set[asyncio.Task[None]] = set()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(timeout=10)
        self.port: int = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _close(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target_port)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(
                self._direction(reader, up_writer), self._direction(up_reader, writer)
            )
        finally:
            self._tasks.discard(task)

    async def _direction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One way: chunks read as they come, written when the link delivers them."""
        in_transit: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        delivering = asyncio.get_running_loop().create_task(self._deliver(in_transit, writer))
        link_free_at = 0.0
        try:
            while data := await reader.read(CHUNK):
                now = time.monotonic()
                leaves = max(now, link_free_at)
                if self._bytes_per_s is not None:
                    leaves += len(data) / self._bytes_per_s
                link_free_at = leaves
                await in_transit.put((leaves + self._delay_s, data))
        except (ConnectionError, OSError):
            pass
        finally:
            await in_transit.put((0.0, b""))  # the end, after what is in transit
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await delivering

    @staticmethod
    async def _deliver(
        in_transit: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                arrives, data = await in_transit.get()
                if not data:
                    break
                wait = arrives - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()
