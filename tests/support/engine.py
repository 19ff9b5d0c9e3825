"""A real engine in its own process, on a free port of 127.0.0.1, for a test to talk to."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.client import SUPERUSER, SUPERUSER_PASSWORD, BlockingEngine
from tests.support.process import ManagedProcess
from tests.support.wait import wait_for

__all__ = [
    "BIN",
    "SUPERUSER",
    "SUPERUSER_PASSWORD",
    "EngineProcess",
    "ProvisionedEngines",
    "attach_url_on",
    "engine_env",
    "free_port",
    "start_engine",
    "write_provisioners",
]

BIN = Path(sys.executable).parent


def engine_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    env.update(
        FLUKSIO_SUPERUSER=SUPERUSER,
        FLUKSIO_SUPERUSER_PASSWORD=SUPERUSER_PASSWORD,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@dataclass
class EngineProcess(ManagedProcess):
    data_dir: Path
    url: str
    stdout_path: Path
    netns: str | None = None
    """The network namespace it runs in (an air gap): the test's calls go there too."""
    ca_file: str | None = None
    """The private CA its certificate is signed by, for the test's calls to trust."""

    @property
    def api(self) -> str:
        return f"{self.url}/api/v1"

    def client(self, token: str = "") -> BlockingEngine:
        """Its API, through the client interface, sending ``token``."""
        return BlockingEngine(self.url, token=token, ca_file=self.ca_file, netns=self.netns)

    def login(self, username: str = SUPERUSER, password: str = SUPERUSER_PASSWORD) -> str:
        return self.client().login(username, password)

    def mint(self, access: str, name: str, labels: list[str]) -> dict[str, Any]:
        """Mint a worker token through the API; the answer's body (token, jti, ...)."""
        return self.client(access).mint_token(name, labels)

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")


def start_engine(
    data_dir: Path,
    log_dir: Path,
    *,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
    timeout: float = 20,
    port: int = 0,
    netns: str | None = None,
    ca_file: str | None = None,
) -> EngineProcess:
    """An engine on ``port`` (0: any free one); in network namespace ``netns`` if given."""
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout_path = log_dir / "engine.stdout"
    stderr_path = log_dir / "engine.stderr"
    with stdout_path.open("ab") as out, stderr_path.open("ab") as err:
        process = subprocess.Popen(
            [
                *(("ip", "netns", "exec", netns) if netns else ()),
                str(BIN / "fluksio"),
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data_dir),
                *args,
            ],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env or engine_env(),
            cwd=log_dir,  # calls on the engine write here, never into the checkout
        )
    info_path = data_dir / "engine.json"

    def ready() -> str | None:
        if process.poll() is not None:
            raise AssertionError(
                f"engine exited with {process.returncode}: {stderr_path.read_text()[-2000:]}"
            )
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            return None
        return str(info["url"]) if info.get("pid") == process.pid else None

    try:
        url = wait_for(ready, timeout=timeout, what="the engine to listen")
    except BaseException:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        raise
    return EngineProcess(process, stderr_path, data_dir, url, stdout_path, netns, ca_file)


def ready(engine: EngineProcess) -> tuple[int, str]:
    """``GET /healthz/ready``: its status and what it said; 0 and why when no answer came
    (a standby handing its socket to the engine it becomes cuts a request under way, as
    a restart does)."""
    try:
        with urllib.request.urlopen(f"{engine.api}/healthz/ready", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
    except (urllib.error.URLError, OSError) as lost:
        return 0, str(lost)


def attach_url_on(port: int, scheme: str = "ws") -> str:
    """The attach URL of an engine that will listen on ``port``: a provisioner's
    ``engine_url``, written before the engine starts."""
    return f"{scheme}://127.0.0.1:{port}/api/v1/workers/attach"


def write_provisioners(data_dir: Path, entries: list[dict[str, Any]]) -> None:
    """``entries`` as ``data_dir/provisioners.json``; a new ``data_dir`` is made private
    (0700), as the engine requires."""
    data_dir.mkdir(mode=0o700, exist_ok=True)
    (data_dir / "provisioners.json").write_text(json.dumps(entries))


def free_port() -> int:
    """A port nothing listens on now, for an engine whose URL must be known before it starts
    (a provisioners.json names it) or that must come back on the same one."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ProvisionedEngines:
    """The engines one test starts, each on its data directory's ``provisioners.json``,
    each with logs of its own under ``root``; the fixture stops them all at its end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[EngineProcess] = []

    def start(
        self,
        data_dir: Path,
        entries: list[dict[str, Any]],
        port: int,
        args: tuple[str, ...] = (),
    ) -> tuple[EngineProcess, str]:
        """An engine with ``entries`` as its provisioners, and its superuser's token."""
        write_provisioners(data_dir, entries)
        logs = self.root / f"logs{len(self.started)}"
        engine = start_engine(data_dir, logs, port=port, args=args)
        self.started.append(engine)
        return engine, engine.login()

    def stop_all(self) -> None:
        for engine in self.started:
            engine.stop()
