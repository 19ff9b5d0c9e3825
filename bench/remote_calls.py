"""No-op node calls on a remote worker, and how many idle workers one engine holds.

One engine and one of our agents on 127.0.0.1 (real processes):

* a one-node run on the worker, ``POST /runs`` to finished: p50 and p99, one at a time;
* a fan-out of no-op nodes bound to the worker, with ``--parallel`` 1, 4 and 16;
* attach scale: N simulated agents (plain WebSocket clients speaking protocol 2) attach
  to one engine; the engine's memory per attached worker and the time for all to attach.

Floors in the same run: one call through the launcher alone (no engine, no socket), and an
aiohttp WebSocket echo round trip on 127.0.0.1.

Run: ``.venv/bin/python bench/remote_calls.py [--runs N] [--fanout N] [--idle-workers N]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parent))
from calls import BIN, NOOP, Api, measure_launcher, process_cpu_seconds, start_engine


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _login(url: str) -> Api:
    return Api.logged_in(url)


def _start_agent(
    url: str, token: str, parallel: int, *options: str, bin_dir: Path = BIN
) -> subprocess.Popen[bytes]:
    env = dict(os.environ, FLUKSIO_WORKER_TOKEN=token)
    return subprocess.Popen(
        [
            str(bin_dir / "fluksio-worker"),
            "--url",
            url.replace("http", "ws") + "/api/v1/workers/attach",
            "--labels",
            "remote",
            "--parallel",
            str(parallel),
            "--name",
            f"p{parallel}",
            *options,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_attached(api: Api, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(w["name"].endswith(name) for w in api.call("GET", "/workers")):
            return
        time.sleep(0.05)
    raise RuntimeError(f"agent {name} did not attach")


def attached_agents(
    api: Api, url: str, names: tuple[str, ...], parallel: int
) -> list[subprocess.Popen[bytes]]:
    """One of our agents per name, each on a token of its own, labelled ``remote``, with
    ``--parallel``; returned once every one is attached."""
    agents = []
    for name in names:
        token = api.call("POST", "/workers/tokens", {"name": name, "labels": ["remote"]})
        agents.append(_start_agent(url, token["token"], parallel, "--name", name))
        _wait_attached(api, name)
    return agents


def one_node_latency(api: Api, runs: int) -> dict[str, float]:
    """p50 and p99 (s) of flow ``one`` from POST to finished, after 20 to warm up."""
    for _ in range(20):
        api.run_to_end("one")
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        assert api.run_to_end("one")["state"] == "succeeded"
        samples.append(time.perf_counter() - started)
    samples.sort()
    return {
        "run_p50": samples[len(samples) // 2],
        "run_p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
    }


def measure_remote(args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        try:
            api = _login(url)
            token = api.call("POST", "/workers/tokens", {"name": "bench", "labels": ["remote"]})[
                "token"
            ]
            api.call(
                "PUT", "/flows/one", {"nodes": [{"id": "n", "code": NOOP, "worker": "remote"}]}
            )
            nodes = [{"id": f"n{i}", "code": NOOP, "worker": "remote"} for i in range(args.fanout)]
            api.call("PUT", "/flows/fanout", {"nodes": nodes})
            for parallel in (1, 4, 16):
                agent = _start_agent(url, token, parallel)
                try:
                    _wait_attached(api, f"p{parallel}")
                    if parallel == 1:
                        cpu_before = process_cpu_seconds(engine.pid)
                        results.update(one_node_latency(api, args.runs))
                        spent = process_cpu_seconds(engine.pid) - cpu_before
                        results["run_cpu"] = spent / (args.runs + 20)  # with its warm-up
                    cpu_before = process_cpu_seconds(engine.pid)
                    started = time.perf_counter()
                    assert api.run_to_end("fanout")["state"] == "succeeded"
                    results[f"fanout_{parallel}"] = args.fanout / (time.perf_counter() - started)
                    spent = process_cpu_seconds(engine.pid) - cpu_before
                    results[f"fanout_cpu_{parallel}"] = spent / args.fanout
                finally:
                    agent.terminate()
                    agent.wait(timeout=30)
        finally:
            engine.terminate()
            engine.wait(timeout=30)
    return results


async def _simulated_agents(url: str, token: str, count: int, first: int = 0) -> float:
    """Attach ``count`` plain WebSocket clients, named from ``sim{first}`` on; seconds until
    all were welcomed. They stay attached in ``_simulated_agents.sockets``."""
    attach = url.replace("http", "ws") + "/api/v1/workers/attach"
    connector = aiohttp.TCPConnector(limit=0)
    session = aiohttp.ClientSession(connector=connector)
    sockets: list[aiohttp.ClientWebSocketResponse] = []
    gate = asyncio.Semaphore(64)

    async def one(index: int) -> None:
        async with gate:
            ws = await session.ws_connect(attach, headers={"Authorization": f"Bearer {token}"})
            await ws.send_str(
                json.dumps(
                    {
                        "op": "hello",
                        "protocol": 2,
                        "name": f"sim{index}",
                        "labels": ["sim"],
                        "max_parallel": 1,
                        "inventory": {"cpus": 4, "gpus": 0, "ram_mb": 8192},
                    }
                )
            )
            reply = json.loads((await ws.receive(timeout=60)).data)
            assert reply["op"] == "welcome", reply
            sockets.append(ws)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(first, first + count)))
    elapsed = time.perf_counter() - started
    _simulated_agents.sockets = (session, sockets)  # type: ignore[attr-defined]
    return elapsed


def measure_attach_scale(count: int) -> dict[str, float]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count * 2 + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        try:
            api = _login(url)
            token = api.call("POST", "/workers/tokens", {"name": "sim", "labels": ["sim"]})["token"]
            time.sleep(0.5)
            before = _rss_mb(engine.pid)
            loop = asyncio.new_event_loop()
            elapsed = loop.run_until_complete(_simulated_agents(url, token, count))
            listed = api.call("GET", "/workers")
            after = _rss_mb(engine.pid)
            session, sockets = _simulated_agents.sockets  # type: ignore[attr-defined]
            for ws in sockets:
                loop.run_until_complete(ws.close())
            loop.run_until_complete(session.close())
            loop.close()
            assert len(listed) == count, len(listed)
        finally:
            engine.terminate()
            engine.wait(timeout=60)
    return {
        "attach_s": elapsed,
        "engine_mb": after,
        "kb_per_worker": (after - before) * 1024 / count,
    }


async def _echo_round_trip(count: int) -> float:
    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            await ws.send_str(message.data)
        return ws

    app = web.Application()
    app.router.add_get("/", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    samples = []
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{port}/") as ws,
    ):
        for _ in range(count):
            started = time.perf_counter()
            await ws.send_str("ping")
            await ws.receive()
            samples.append(time.perf_counter() - started)
    await runner.cleanup()
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--fanout", type=int, default=1000)
    parser.add_argument("--idle-workers", type=int, default=5000)
    args = parser.parse_args()

    echo = asyncio.run(_echo_round_trip(2000))
    launcher = measure_launcher("auto", 200)
    remote = measure_remote(args)
    scale = measure_attach_scale(args.idle_workers)

    n = args.idle_workers
    rows = [
        ("floor: aiohttp WebSocket echo round trip, p50 (us)", f"{echo * 1e6:.0f}"),
        ("floor: one call through the launcher alone, p50 (ms)", f"{launcher * 1e3:.2f}"),
        ("one-node run on a worker, POST to finished, p50 (ms)", f"{remote['run_p50'] * 1e3:.2f}"),
        ("one-node run on a worker, POST to finished, p99 (ms)", f"{remote['run_p99'] * 1e3:.2f}"),
        ("  engine process CPU per one-node run (ms)", f"{remote['run_cpu'] * 1e3:.2f}"),
        *[
            (
                f"fan-out of {args.fanout} no-op calls, --parallel {p} (calls/s)",
                f"{remote[f'fanout_{p}']:.0f}",
            )
            for p in (1, 4, 16)
        ],
        ("  engine process CPU per call, --parallel 1 (ms)", f"{remote['fanout_cpu_1'] * 1e3:.2f}"),
        (f"{n} simulated agents: time to attach all (s)", f"{scale['attach_s']:.2f}"),
        (f"{n} simulated agents: engine RSS (MB)", f"{scale['engine_mb']:.0f}"),
        ("  engine memory per attached worker (KB)", f"{scale['kb_per_worker']:.1f}"),
    ]
    print(f"{os.cpu_count()} cores; Python {sys.version.split()[0]}")
    print(f"{'measure':60} {'value':>10}")
    for label, value in rows:
        print(f"{label:60} {value:>10}")


if __name__ == "__main__":
    main()
