"""A real ``fluksio-worker`` process attached to a test engine."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.engine import BIN, EngineProcess


def attach_url(engine: EngineProcess) -> str:
    return engine.url.replace("http://", "ws://") + "/api/v1/workers/attach"


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self._stopped:
            return self.process.returncode
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout=timeout)
        self._stopped = True
        return code


def start_worker(
    engine: EngineProcess,
    token: str,
    log_dir: Path,
    *args: str,
    executable: Path | None = None,
    env: dict[str, str] | None = None,
) -> WorkerProcess:
    """Start an agent (ours by default) with the token in its environment, never in argv."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"worker-{len(list(log_dir.glob('worker-*.log')))}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    full_env.update(env or {})
    full_env["FLUKSIO_WORKER_TOKEN"] = token
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [str(executable or BIN / "fluksio-worker"), "--url", attach_url(engine), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
        )
    return WorkerProcess(process, log_path)
