"""What one large frame from a worker costs the engine in memory.

A real engine and a real ``fluksio-worker`` on 127.0.0.1; one node on the worker returns a
string of the given size, so the agent sends one answer frame of about that size. The
engine's peak resident memory (``VmHWM``) is reset to its idle size just before the
call (``/proc/PID/clear_refs``) and read after its run ended (polled through
``GET /runs``, which carries no results, so reading does not add a copy); the growth,
divided by the frame's size, is the frame's cost at its peak. What stays resident after
the run is shown too, and after three more of the same (it must not grow). A fresh
engine per size.

Then the frame no call waits for: a worker (a raw WebSocket with a real worker token)
sends an answer of the same size naming a call never sent. The engine judges it by its
first bytes as it arrives and passes it over, never held whole (before issue 48, aiohttp
assembled it first: 3x its size).
The pong to a ping sent behind it says it has been dealt with.

The floor is 1.0: the frame's bytes, held once.

Run: ``.venv/bin/python bench/frame_memory.py [--mib 1 16 60]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import aiohttp
from calls import Api, start_engine, start_worker, stop

MIB = 1024 * 1024


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def _run_to_end(api: Api) -> None:
    run_id = api.call("POST", "/flows/big/runs", {"params": {}})["id"]
    deadline = time.monotonic() + 120
    state = "queued"
    while state not in {"succeeded", "failed"} and time.monotonic() < deadline:
        time.sleep(0.1)
        state = next(r["state"] for r in api.call("GET", "/runs") if r["id"] == run_id)
    if state != "succeeded":
        raise RuntimeError(f"the run ended {state}")


def measure(mib: int) -> dict[str, float]:
    node = f"def process():\n    return 'x' * {mib * MIB}\n"
    with tempfile.TemporaryDirectory() as root:
        engine, url = start_engine(
            Path(root) / "data", "auto", args=("--max-frame-bytes", str((mib + 4) * MIB))
        )
        worker = None
        try:
            api = Api.logged_in(url)
            worker = start_worker(api, url, "big")
            api.call("PUT", "/flows/big", {"nodes": [{"id": "n", "worker": "big", "code": node}]})
            Path(f"/proc/{engine.pid}/clear_refs").write_text("5")  # the peak, from now
            before_kb = _status_kb(engine.pid, "VmHWM")
            _run_to_end(api)
            peak_kb = _status_kb(engine.pid, "VmHWM")
            after_kb = _status_kb(engine.pid, "VmRSS")
            for _ in range(3):  # more of the same: what stays must not grow
                _run_to_end(api)
            again_kb = _status_kb(engine.pid, "VmRSS")
            peak_kb = _status_kb(engine.pid, "VmHWM")
            after_kb = _status_kb(engine.pid, "VmRSS")
        finally:
            stop(worker, engine)
    return {
        "mib": mib,
        "peak_growth_mib": (peak_kb - before_kb) / 1024,
        "kept_mib": (after_kb - before_kb) / 1024,
        "kept_after_4_mib": (again_kb - before_kb) / 1024,
        "before_mib": before_kb / 1024,
    }


async def _send_unclaimed(url: str, token: str, mib: int) -> None:
    hello = {"op": "hello", "protocol": 2, "name": "bench", "labels": [], "version": "bench"}
    attach = url.replace("http", "ws", 1) + "/api/v1/workers/attach"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            attach, headers={"Authorization": f"Bearer {token}"}, max_msg_size=0, autoping=False
        ) as ws,
    ):
        await ws.send_str(json.dumps(hello))
        welcome = json.loads((await ws.receive(timeout=30)).data)
        if welcome.get("op") != "welcome":
            raise RuntimeError(f"not attached: {welcome}")
        await ws.send_str(
            '{"call_id": "never-sent", "ok": true, "result": "' + "x" * (mib * MIB) + '"}'
        )
        await ws.ping()
        # Our pong comes once the engine has read, and dropped, the frame before it.
        while (await ws.receive(timeout=120)).type != aiohttp.WSMsgType.PONG:
            pass


def measure_unclaimed(mib: int) -> float:
    """Peak growth (MiB) for an answer frame naming no call in flight."""
    with tempfile.TemporaryDirectory() as root:
        engine, url = start_engine(
            Path(root) / "data", "auto", args=("--max-frame-bytes", str((mib + 4) * MIB))
        )
        try:
            api = Api.logged_in(url)
            token = api.call("POST", "/workers/tokens", {"name": "bench", "labels": []})["token"]
            Path(f"/proc/{engine.pid}/clear_refs").write_text("5")
            before_kb = _status_kb(engine.pid, "VmHWM")
            asyncio.run(_send_unclaimed(url, token, mib))
            peak_kb = _status_kb(engine.pid, "VmHWM")
        finally:
            engine.terminate()
            engine.wait(timeout=30)
    return (peak_kb - before_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 16, 60])
    parser.add_argument("--unclaimed-only", action="store_true")
    parsed = parser.parse_args()
    sizes, unclaimed_only = parsed.mib, parsed.unclaimed_only
    print(
        f"{'frame (MiB)':>12} {'peak growth (MiB)':>18} {'peak / size':>12} {'floor':>6}"
        f" {'idle RSS (MiB)':>15} {'kept after 1 (MiB)':>19} {'after 4':>8}"
    )
    for mib in sizes if not unclaimed_only else []:
        row = measure(mib)
        print(
            f"{mib:12d} {row['peak_growth_mib']:18.1f} {row['peak_growth_mib'] / mib:12.2f}"
            f" {1.0:6.1f} {row['before_mib']:15.1f} {row['kept_mib']:19.1f}"
            f" {row['kept_after_4_mib']:8.1f}"
        )
    print()
    print(
        f"{'unclaimed frame (MiB)':>22} {'peak growth (MiB)':>18} {'peak / size':>12} {'floor':>6}"
    )
    for mib in sizes:
        growth = measure_unclaimed(mib)
        print(f"{mib:22d} {growth:18.1f} {growth / mib:12.2f} {1.0:6.1f}")


if __name__ == "__main__":
    main()
