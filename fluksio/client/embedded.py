"""``local()``: an engine of one's own, for a laptop, a notebook or a test.

    from fluksio.client import local

    with local() as client:
        client.put_flow("hello", [{"id": "n", "code": "def process():\\n    return 1\\n"}])
        print(client.wait_run(client.start_run("hello").id).nodes[0].result)

The engine runs in this process, on a thread of its own, on a temporary data directory
and a free port of 127.0.0.1; its calls run on this machine. With ``worker_labels`` a
``fluksio-worker`` with those labels attaches too, as on any machine. On leaving, the
worker and the engine stop (its calls are stopped) and the directory is deleted: nothing
is left. The same code then points at a shared engine with ``Client(url)``.

This is the one module of ``fluksio.client`` that imports the engine: ``Client`` alone
never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from fluksio.api.server import run_engine
from fluksio.client.client import Client
from fluksio.client.errors import ClientError
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.settings import EngineSettings
from fluksio.engine.users import UserStore
from fluksio.logs import LogSecrets, configure_logging

__all__ = ["local"]

START_WITHIN_S = 60.0
"""How long the engine, and then the worker, may take to be ready."""
STOP_WITHIN_S = 30.0
LOCAL_USER = "local"


@contextlib.contextmanager
def local(
    *, worker_labels: list[str] | None = None, engine_slots: int | None = None
) -> Iterator[Client]:
    """An engine on this machine, and a client logged in to it, until the block ends.

    ``worker_labels``: also attach a local ``fluksio-worker`` with these labels (calls
    that require one go there); ``engine_slots``: how many calls the engine itself runs at
    once (default: the engine's).
    """
    root = Path(tempfile.mkdtemp(prefix="fluksio-local-"))
    try:
        password = _superuser(root)
        with _engine(root, engine_slots, LogSecrets(password)) as url:
            client = Client(url)
            client.login(LOCAL_USER, password)
            if worker_labels is None:
                yield client
            else:
                with _worker(client, url, root, worker_labels):
                    yield client
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _superuser(root: Path) -> str:
    """A superuser with a password made here, kept in memory only."""
    layout = DataDir(root).ensure()
    password = secrets.token_urlsafe(18)
    database = open_database(layout.database)
    try:
        UserStore(database).add(LOCAL_USER, password, is_superuser=True)
    finally:
        database.close()
    return password


@contextlib.contextmanager
def _engine(root: Path, engine_slots: int | None, log_secrets: LogSecrets) -> Iterator[str]:
    """The engine on its own thread and event loop; its base URL while it serves."""
    options = {} if engine_slots is None else {"engine_slots": engine_slots}
    settings = EngineSettings(data_dir=root, host="127.0.0.1", port=0, **options)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready: list[str] = []
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            serving = run_engine(
                settings, on_ready=ready.append, stop=stop, log_secrets=log_secrets
            )
            loop.run_until_complete(serving)
        except BaseException as exc:  # reported to the caller, not lost on this thread
            failed.append(exc)
        finally:
            loop.close()

    if not structlog.is_configured():
        configure_logging(level="warning")  # the engine's news would drown a notebook's
    thread = threading.Thread(target=serve, name="fluksio-local-engine", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_WITHIN_S
    while not ready and not failed and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        if not ready:
            reason = f" ({failed[0]})" if failed else ""
            raise ClientError(f"the local engine did not start{reason}")
        yield ready[0]
    finally:
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # it closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        thread.join(STOP_WITHIN_S)


@contextlib.contextmanager
def _worker(client: Client, url: str, root: Path, labels: list[str]) -> Iterator[None]:
    """A ``fluksio-worker`` with ``labels``; its token travels in its environment only."""
    token = client.mint_worker_token("local-worker", labels).token
    command = [
        sys.executable,
        "-c",
        "from fluksio.agent.cli import main; main()",
        "--url",
        url.replace("http://", "ws://", 1) + "/api/v1/workers/attach",
        "--name",
        "local-worker",
        "--labels",
        ",".join(labels),
    ]
    env = {**os.environ, "FLUKSIO_WORKER_TOKEN": token}
    log = (root / "worker.log").open("ab")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=log, cwd=root)
    try:
        deadline = time.monotonic() + START_WITHIN_S
        while not any(getattr(w, "name", "") == "local-worker" for w in client.workers()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise ClientError(
                    f"the local worker did not attach (see {root / 'worker.log'} while it lasts)"
                )
            time.sleep(0.05)
        yield
    finally:
        process.terminate()
        try:
            process.wait(STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
