"""Many idle workers on one engine: time to attach them all, memory, and the idle cost.

Simulated agents (plain WebSocket clients speaking protocol 2, as in
``bench/remote_calls.py``) attach from several client processes, since one process may
hold only so many sockets. Then they stay idle for 10 s. For the engine, it prints:

* the wall time until every worker was welcomed;
* its CPU time per attach;
* its resident memory before and after, and per worker;
* its CPU while they are idle, as a share of one core.

The floor, in the same run, is the same clients against a bare aiohttp server that
answers each hello with a welcome and keeps the socket: what any aiohttp server pays
for the connections themselves.

Run: ``.venv/bin/python bench/idle_workers.py [--workers N] [--clients K]``
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from calls import start_engine
from remote_calls import _login, _rss_mb

HERE = Path(__file__).parent

CLIENT = r"""
import asyncio, resource, sys
sys.path.insert(0, sys.argv[1])
from remote_calls import _simulated_agents
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
url, token, first, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

async def main():
    await _simulated_agents(url, token, count, first)
    print("attached", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    session, _sockets = _simulated_agents.sockets
    await session.close()

asyncio.run(main())
"""

BARE_SERVER = r"""
import json, sys
from aiohttp import web

async def attach(request):
    ws = web.WebSocketResponse(autoping=False)
    await ws.prepare(request)
    async for message in ws:
        if json.loads(message.data).get("op") == "hello":
            await ws.send_str(json.dumps({"op": "welcome", "protocol": 2}))
    return ws

app = web.Application()
app.router.add_get("/api/v1/workers/attach", attach)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _attach_all(pid: int, url: str, token: str, workers: int, clients: int) -> dict[str, float]:
    before_mb, before_cpu = _rss_mb(pid), _cpu_s(pid)
    each = workers // clients
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT, str(HERE), url, token, str(k * each), str(each)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(clients)
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline().strip() == "attached"
        wall = time.perf_counter() - started
        attach_cpu = _cpu_s(pid) - before_cpu
        time.sleep(1)
        after_mb = _rss_mb(pid)
        idle_from = _cpu_s(pid)
        time.sleep(10)
        idle = (_cpu_s(pid) - idle_from) / 10
    finally:
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("\n")
            process.stdin.flush()
            process.wait(timeout=300)
    return {
        "attach_s": wall,
        "cpu_ms": attach_cpu / (each * clients) * 1e3,
        "mb": after_mb,
        "kb_per_worker": (after_mb - before_mb) * 1024 / (each * clients),
        "idle_core": idle,
    }


def measure_engine(workers: int, clients: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        try:
            api = _login(url)
            token = api.call("POST", "/workers/tokens", {"name": "sim", "labels": ["sim"]})
            time.sleep(0.5)
            return _attach_all(engine.pid, url, token["token"], workers, clients)
        finally:
            engine.terminate()
            engine.wait(timeout=300)


def measure_bare(workers: int, clients: int) -> dict[str, float]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return _attach_all(server.pid, f"http://127.0.0.1:{port}", "x", workers, clients)
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=2)
    args = parser.parse_args()
    bare = measure_bare(args.workers, args.clients)
    ours = measure_engine(args.workers, args.clients)
    print(
        f"{args.workers} idle workers from {args.clients} client processes; {os.cpu_count()} cores"
    )
    print(f"{'measure':44} {'engine':>10} {'bare aiohttp':>13} {'ratio':>7}")
    rows = [
        ("all attached (s)", "attach_s", "{:.2f}"),
        ("server CPU per attach (ms)", "cpu_ms", "{:.2f}"),
        ("server RSS after (MB)", "mb", "{:.0f}"),
        ("server memory per worker (KB)", "kb_per_worker", "{:.1f}"),
        ("server CPU while idle (share of a core)", "idle_core", "{:.3f}"),
    ]
    for label, key, shape in rows:
        ratio = ours[key] / bare[key] if bare[key] else float("nan")
        print(
            f"{label:44} {shape.format(ours[key]):>10} {shape.format(bare[key]):>13} {ratio:7.1f}"
        )


if __name__ == "__main__":
    main()
