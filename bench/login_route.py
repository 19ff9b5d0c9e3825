"""The login route beside the direct one: what the way in through the login node costs.

A real engine on 127.0.0.1 and the local Slurm's sshd as the login node (``make
slurm-up``): the bench keeps a login route (:class:`~fluksio.provisioners.login_route.
LoginRoute`, either transport) from a relay on the login node to the engine, and measures in one
session, alternately:

* a one-node run on a remote worker, ``POST /runs`` to finished, p50: one agent attached
  directly, one through the relay (``--connect-to``);
* a 256 MiB artifact download with curl, directly and through the relay (``curl
  --connect-to``, the same as the agent's), best of three each.

The direct route is the floor: the ratios say what the relay and the SSH connection add.
Plain HTTP both ways (TLS would add the same to each).

Run (as a user who can read the local Slurm's key): ``.venv/bin/python bench/login_route.py
[--runs N] [--size-mb N]``
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from artifacts import _write_random
from calls import BIN, NOOP, Api, start_engine
from remote_calls import _wait_attached

from fluksio.agent import runner
from fluksio.clock import SYSTEM_CLOCK
from fluksio.provisioners.login_route import LoginRoute
from fluksio.ssh import open_transport

SLURM_ENV = Path(os.environ.get("FLUKSIO_SLURM_STATE", "/var/lib/fluksio-slurm")) / "env"


class RouteThread:
    """A login route kept up on an event loop of its own, as the engine keeps one."""

    def __init__(self, engine_port: int, transport: str, tmp: Path) -> None:
        facts = dict(
            line.split("=", 1) for line in SLURM_ENV.read_text().splitlines() if "=" in line
        )
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        shell = open_transport(
            "openssh" if transport == "openssh" else "asyncssh",
            f"{facts['LOGIN']}:{facts['PORT']}",
            facts["KEY"],
            known_hosts=facts["KNOWN_HOSTS"],
            control_path=tmp / "ssh",
        )
        self.shell = shell

        async def build() -> LoginRoute:
            return LoginRoute(
                shell,
                label="bench",
                login_host="127.0.0.1",
                engine=lambda: ("127.0.0.1", engine_port),
                clock=SYSTEM_CLOCK,
            )

        self.route = asyncio.run_coroutine_threadsafe(build(), self._loop).result()
        ready = asyncio.run_coroutine_threadsafe(self.route.ready(60), self._loop)
        self.port = ready.result(timeout=90)[1]

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.route.stop(), self._loop).result(timeout=30)
        asyncio.run_coroutine_threadsafe(self.shell.close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)


def _agent(url: str, token: str, label: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "fluksio-worker"), "--url", url.replace("http", "ws") + "/api/v1/workers/attach",
         "--labels", label, "--name", label, "--artifact-transport", "http", *extra],
        env=dict(os.environ, FLUKSIO_WORKER_TOKEN=token),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _run_p50(api: Api, flow: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        assert api.run_to_end(flow)["state"] == "succeeded"
        samples.append(time.perf_counter() - started)
    samples.sort()
    return samples[len(samples) // 2]


def _download_s(url: str, token: str, digest: str, connect_to: str | None) -> float:
    via = ["--connect-to", connect_to] if connect_to else []
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sf", *via, "-o", "/dev/null", "-H", f"Authorization: Bearer {token}",
         f"{url}/api/v1/artifacts/{digest}"],
        check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def _upload(url: str, token: str, size_mb: int, tmp: Path) -> str:
    source = tmp / "big.bin"
    _write_random(source, size_mb << 20)
    os.environ.update(
        FLUKSIO_ARTIFACT_URL=f"{url}/api/v1/artifacts",
        FLUKSIO_ARTIFACT_TOKEN=token,
        FLUKSIO_ARTIFACT_CACHE=str(tmp / "cache"),
    )
    importlib.reload(runner)
    digest = str(runner.save_artifact(str(source))["digest"])
    source.unlink()
    return digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--transport", choices=("asyncssh", "openssh"), default="asyncssh")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        engine, url = start_engine(Path(tmp) / "data", "auto")
        port = int(url.rsplit(":", 1)[1])
        route = RouteThread(port, args.transport, Path(tmp))
        agents = []
        try:
            api = Api.logged_in(url)
            token = api.call(
                "POST", "/workers/tokens", {"name": "b", "labels": ["direct", "routed"]}
            )["token"]
            agents.append(_agent(url, token, "direct"))
            agents.append(_agent(url, token, "routed", "--connect-to", f"127.0.0.1:{route.port}"))
            for label in ("direct", "routed"):
                api.call(
                    "PUT",
                    f"/flows/{label}",
                    {"nodes": [{"id": "n", "code": NOOP, "worker": label}]},
                )
                _wait_attached(api, label)
                for _ in range(20):
                    api.run_to_end(label)  # warm-up
            runs: dict[str, list[float]] = {"direct": [], "routed": []}
            for _ in range(4):  # alternately, so both see the same machine
                for label, p50s in runs.items():
                    p50s.append(_run_p50(api, label, args.runs // 4))
            digest = _upload(url, api.token or "", args.size_mb, Path(tmp))
            loads: dict[str, list[float]] = {"direct": [], "routed": []}
            for _ in range(3):
                loads["direct"].append(_download_s(url, api.token or "", digest, None))
                routed = f"127.0.0.1:{port}:127.0.0.1:{route.port}"
                loads["routed"].append(_download_s(url, api.token or "", digest, routed))
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(timeout=30)
            route.stop()
            engine.terminate()
            engine.wait(timeout=30)
    run = {label: sorted(samples)[len(samples) // 2] for label, samples in runs.items()}
    mib_s = {label: args.size_mb / min(samples) for label, samples in loads.items()}
    print(f"transport: {args.transport}")
    print(f"{'measure':<44} {'direct (floor)':>15} {'login route':>12} {'ratio':>7}")
    print(
        f"{'one-node remote run, p50 (ms)':<44} {run['direct'] * 1e3:>15.2f}"
        f" {run['routed'] * 1e3:>12.2f} {run['routed'] / run['direct']:>7.2f}"
    )
    print(
        f"{f'{args.size_mb} MiB artifact download (MiB/s)':<44} {mib_s['direct']:>15.0f}"
        f" {mib_s['routed']:>12.0f} {mib_s['direct'] / mib_s['routed']:>7.2f}"
    )


if __name__ == "__main__":
    main()
