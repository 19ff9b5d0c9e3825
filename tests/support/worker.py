"""A real ``fluksio-worker`` process attached to a test engine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.engine import BIN, EngineProcess
from tests.support.process import ManagedProcess


def attach_url(engine: EngineProcess) -> str:
    return engine.url.replace("http://", "ws://") + "/api/v1/workers/attach"


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
) -> WorkerProcess:
    """Start an agent (ours by default) with the token in its environment, never in argv."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"worker-{len(list(log_dir.glob('worker-*.log')))}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    full_env.update(env or {})
    full_env["FLUKSIO_WORKER_TOKEN"] = token
    with log_path.open("ab") as log:
        program = command or [str(executable or BIN / "fluksio-worker")]
        process = subprocess.Popen(
            [*program, "--url", attach_url(engine), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
        )
    return WorkerProcess(process, log_path)
