"""What one poll of the Workers screen costs the engine, with many workers attached.

The page asks for ``GET /workers``, ``/workers/resources`` and ``/workers/tokens`` once a
second. Here the same three requests, one after another, against an engine with 0, 100
and 1000 simulated workers attached (plain WebSocket clients speaking protocol 2, as in
``bench/remote_calls.py``). Floor in the same run: three ``GET /health`` requests, the
cheapest authenticated-free round trips the engine serves.

Each poll is measured twice: as a full answer, and as the page makes it once it holds the
last answers' ETags (``If-None-Match``), with nothing changed meanwhile.

Run: ``.venv/bin/python bench/screen.py [--polls N]``
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import Api, start_engine
from remote_calls import _login, _simulated_agents

POLL = ("/workers", "/workers/resources", "/workers/tokens")


def _median_ms(api: Api, paths: tuple[str, ...], polls: int) -> tuple[float, int]:
    samples, size = [], 0
    for _ in range(polls):
        started = time.perf_counter()
        answers = [api.call("GET", path) for path in paths]
        samples.append((time.perf_counter() - started) * 1000)
        size = sum(len(repr(answer)) for answer in answers)
    return statistics.median(samples), size


def _get(api: Api, path: str, tag: str | None) -> tuple[int, str, int]:
    """(status, ETag, bytes received: the status line and headers as sent, and the body)."""
    response, body = api.request("GET", path, headers={"If-None-Match": tag} if tag else None)
    head = len(f"HTTP/1.1 {response.status} {response.reason}\r\n") + len(str(response.msg))
    return response.status, response.getheader("ETag") or "", head + len(body)


def _unchanged_ms(api: Api, polls: int) -> tuple[float, int, int]:
    """What the page's poll costs once it holds the last answers' tags: (median ms, bytes
    per poll, how many of the answers were 304)."""
    tags = {path: _get(api, path, None)[1] for path in POLL}
    samples, size, not_modified = [], 0, 0
    for _ in range(polls):
        started = time.perf_counter()
        answers = [_get(api, path, tags[path]) for path in POLL]
        samples.append((time.perf_counter() - started) * 1000)
        size = sum(received for _status, _tag, received in answers)
        not_modified = sum(status == 304 for status, _tag, _received in answers)
    return statistics.median(samples), size, not_modified


def measure(count: int, polls: int) -> dict[str, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count * 2 + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        loop = asyncio.new_event_loop()
        try:
            api = _login(url)
            if count:
                token = api.call("POST", "/workers/tokens", {"name": "sim", "labels": ["sim"]})
                loop.run_until_complete(_simulated_agents(url, token["token"], count))
            floor, _ = _median_ms(api, ("/health",) * 3, polls)
            poll, size = _median_ms(api, POLL, polls)
            unchanged, unchanged_size, not_modified = _unchanged_ms(api, polls)
            if count:
                session, sockets = _simulated_agents.sockets  # type: ignore[attr-defined]
                for ws in sockets:
                    loop.run_until_complete(ws.close())
                loop.run_until_complete(session.close())
        finally:
            loop.close()
            engine.terminate()
            engine.wait(timeout=60)
    return {
        "floor_ms": floor,
        "poll_ms": poll,
        "kb": size / 1024,
        "unchanged_ms": unchanged,
        "unchanged_bytes": unchanged_size,
        "not_modified": not_modified,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--polls", type=int, default=50)
    args = parser.parse_args()
    print(
        "workers  floor: 3x /health ms  full poll ms  ratio  answer KB"
        "  unchanged poll ms  ratio  bytes  304s of 3"
    )
    for count in (0, 100, 1000):
        result = measure(count, args.polls)
        ratio = result["poll_ms"] / result["floor_ms"]
        unchanged_ratio = result["unchanged_ms"] / result["floor_ms"]
        print(
            f"{count:7d}  {result['floor_ms']:20.2f}  {result['poll_ms']:12.2f}"
            f"  {ratio:5.1f}  {result['kb']:9.0f}  {result['unchanged_ms']:17.2f}"
            f"  {unchanged_ratio:5.1f}  {result['unchanged_bytes']:5d}"
            f"  {result['not_modified']:10d}"
        )


if __name__ == "__main__":
    main()
