"""A real ``fluksio-worker`` process attached to a test engine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.client import BlockingEngine, SocketEngine
from tests.support.engine import BIN, EngineProcess
from tests.support.process import ManagedProcess


def attach_url(engine: EngineProcess, port: int | None = None) -> str:
    """The engine's attach URL; through ``port`` on this machine if given (a relay's)."""
    scheme, rest = engine.url.split("://", 1)
    if port is not None:
        rest = f"127.0.0.1:{port}"
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/api/v1/workers/attach"


class WorkerProcess(ManagedProcess):
    """An agent process; its stdout and stderr are its log."""


def start_worker(
    engine: EngineProcess,
    token: str,
    log_dir: Path,
    *args: str,
    executable: Path | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    cwd: Path | None = None,
    url: str | None = None,
    user: str | None = None,
) -> WorkerProcess:
    """Start an agent (ours by default) with the token in its environment, never in argv.

    ``url`` is where it dials (the engine's attach URL unless given, e.g. a proxy's);
    ``user`` the unprivileged user it runs as (this process's own unless given).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"worker-{len(list(log_dir.glob('worker-*.log')))}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    full_env.update(env or {})
    full_env["FLUKSIO_WORKER_TOKEN"] = token
    with log_path.open("ab") as log:
        program = command or [str(executable or BIN / "fluksio-worker")]
        process = subprocess.Popen(
            [*program, "--url", url or attach_url(engine), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            # In the test's own directory: what a call writes must never land in the checkout.
            cwd=cwd or log_dir,
            user=user,
        )
    return WorkerProcess(process, log_path)


def start_labelled_worker(
    engine: EngineProcess,
    admin: str,
    label: str,
    log_dir: Path,
    *args: str,
    token_name: str | None = None,
    **options: Any,
) -> WorkerProcess:
    """A worker with ``label``, on a token of its own that ``admin`` mints (named
    ``token_name``, else the label); ``args`` and ``options`` as for :func:`start_worker`."""
    token = engine.mint(admin, token_name or label, [label])["token"]
    return start_worker(engine, token, log_dir, "--labels", label, *args, **options)


def hello_with_protocol(
    engine: EngineProcess, token: str, name: str, labels: list[str], *, protocol: int
) -> dict[str, Any]:
    """Say hello as an agent of another protocol would; the engine's reply (it then closes).
    The token goes in the query, as the published agent sends it."""

    async def hello(api: SocketEngine) -> dict[str, Any]:
        async with await api.ws_connect("/workers/attach", {}, params={"token": token}) as ws:
            frame = {
                "op": "hello",
                "protocol": protocol,
                "name": name,
                "labels": labels,
                "python": "/usr/bin/python3",
            }
            await ws.send_str(json.dumps(frame))
            reply: dict[str, Any] = json.loads((await ws.receive(timeout=10)).data)
            closing = await ws.receive(timeout=10)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            return reply

    return BlockingEngine(engine.url).using(hello)


def worker_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``fluksio-worker ARGS`` with a placeholder token, for what it says before it dials."""
    return subprocess.run(
        [str(BIN / "fluksio-worker"), *args],
        env={**os.environ, "FLUKSIO_WORKER_TOKEN": "x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
