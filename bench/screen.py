"""What one poll of the Workers screen costs the engine, with many workers attached.

The page asks for ``GET /workers``, ``/workers/resources`` and ``/workers/tokens`` once a
second. Here the same three requests, one after another, against an engine with 0, 100
and 1000 simulated workers attached (plain WebSocket clients speaking protocol 2, as in
``bench/remote_calls.py``). Floor in the same run: three ``GET /health`` requests, the
cheapest authenticated-free round trips the engine serves.

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
            if count:
                session, sockets = _simulated_agents.sockets  # type: ignore[attr-defined]
                for ws in sockets:
                    loop.run_until_complete(ws.close())
                loop.run_until_complete(session.close())
        finally:
            loop.close()
            engine.terminate()
            engine.wait(timeout=60)
    return {"floor_ms": floor, "poll_ms": poll, "kb": size / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--polls", type=int, default=50)
    args = parser.parse_args()
    print("workers  floor: 3x /health ms  one screen poll ms  ratio  answer KB")
    for count in (0, 100, 1000):
        result = measure(count, args.polls)
        ratio = result["poll_ms"] / result["floor_ms"]
        print(
            f"{count:7d}  {result['floor_ms']:20.2f}  {result['poll_ms']:18.2f}"
            f"  {ratio:5.1f}  {result['kb']:9.0f}"
        )


if __name__ == "__main__":
    main()
