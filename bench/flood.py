"""A worker that floods the engine with frames: how long until it is cut off, and what
``GET /health`` costs meanwhile.

One real engine process on 127.0.0.1; one WebSocket client attaches with a real worker
token and sends heartbeat frames as fast as it can. Beside it, a client times
``GET /api/v1/health`` one request at a time: first with no flood (the floor), then while
the flood lasts. The engine's frame budget (``worker_frames_per_s``, burst
``worker_frame_burst``) ends the flood; the run is bounded by ``--seconds`` either way.

Run: ``.venv/bin/python bench/flood.py [--seconds S]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine


async def _health_latencies(
    http: aiohttp.ClientSession, url: str, until: asyncio.Event, limit: int
) -> list[float]:
    samples: list[float] = []
    while not until.is_set() and len(samples) < limit:
        started = time.perf_counter()
        async with http.get(f"{url}/api/v1/health") as answer:
            await answer.read()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _flood(
    http: aiohttp.ClientSession, url: str, token: str, seconds: float
) -> tuple[int, float, int | None]:
    """Frames sent, seconds until the engine closed the socket, and its close code."""
    socket = await http.ws_connect(
        url.replace("http", "ws") + "/api/v1/workers/attach",
        headers={"Authorization": f"Bearer {token}"},
    )
    hello = {"op": "hello", "protocol": 2, "name": "flood", "labels": [], "version": "bench"}
    await socket.send_str(json.dumps(hello))
    await socket.receive(timeout=10)
    frame = json.dumps({"call_id": "none", "event": "heartbeat"})
    sent, started = 0, time.perf_counter()
    deadline = started + seconds
    closed_at: list[float] = []

    async def hear_the_close() -> None:
        await socket.receive()  # the engine's close frame, whenever it comes
        closed_at.append(time.perf_counter())

    listener = asyncio.ensure_future(hear_the_close())
    try:
        while not closed_at and time.perf_counter() < deadline:
            for _ in range(100):
                await socket.send_str(frame)
            sent += 100
            await asyncio.sleep(0)
    except (ConnectionError, RuntimeError):
        pass
    await asyncio.wait([listener], timeout=5)
    ended = closed_at[0] if closed_at else time.perf_counter()
    await socket.close()
    return sent, ended - started, socket.close_code


async def measure(url: str, token: str, seconds: float) -> None:
    async with aiohttp.ClientSession() as http:
        idle_done = asyncio.Event()
        idle = await _health_latencies(http, url, idle_done, 300)
        flood_over = asyncio.Event()
        flood = asyncio.ensure_future(_flood(http, url, token, seconds))
        flood.add_done_callback(lambda _f: flood_over.set())
        during = await _health_latencies(http, url, flood_over, 100_000)
        sent, lasted, code = await flood
    print(f"{'measure':52} {'value':>10}")
    print(f"{'floor: GET /health, no flood, p50 (ms)':52} {statistics.median(idle):10.2f}")
    if during:
        print(f"{'GET /health during the flood, p50 (ms)':52} {statistics.median(during):10.2f}")
        print(f"{'GET /health during the flood, max (ms)':52} {max(during):10.2f}")
        ratio = statistics.median(during) / statistics.median(idle)
        print(f"{'  p50 during / floor':52} {ratio:10.1f}")
    print(f"{'frames the flood sent':52} {sent:10d}")
    print(f"{'seconds until the engine closed it':52} {lasted:10.2f}")
    print(f"{'close code (1008: cut off for flooding)':52} {code!s:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    seconds = parser.parse_args().seconds
    with tempfile.TemporaryDirectory() as root:
        process, url = start_engine(Path(root) / "data", "auto")
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "flood", "labels": []})["token"]
            asyncio.run(measure(url, token, seconds))
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
