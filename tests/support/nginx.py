"""Debian's nginx in front of an engine, with the configuration ``docs/deploying.md`` gives.

The ``nginx`` block of that page is used as written; only its port, certificate paths and
the engine's address are replaced, each exactly once, so the page cannot drift from what
is tested. nginx runs in the foreground from a directory of its own (its temporary
directories there too, so a test can see that nothing was spooled) and is stopped by pid.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.certs import KeyPair
from tests.support.ci import cannot_run
from tests.support.wait import wait_for

__all__ = ["Nginx", "documented_config", "start_nginx"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploying.md"
TEMP_DIRS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def documented_config(fence: str = "nginx") -> str:
    """The page's one block fenced as ``fence`` (``nginx``, or ``nginx-failover``: what
    changes for two engines)."""
    found = re.findall(rf"```{fence}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (block,) = found
    return str(block)


def _for_engines(site: str, ports: list[int]) -> str:
    """The documented site for one engine, or for two as the failover block changes it:
    its upstream in place of the site's, its directives at the server's level."""
    if len(ports) == 1:
        return _replace_once(site, "server 127.0.0.1:8080;", f"server 127.0.0.1:{ports[0]};")
    failover = documented_config("nginx-failover")
    upstream_end = failover.index("\n}\n") + 3
    upstream, directives = failover[:upstream_end], failover[upstream_end:]
    for documented, port in zip(("127.0.0.1:8080", "127.0.0.1:8081"), ports, strict=True):
        upstream = _replace_once(upstream, documented, f"127.0.0.1:{port}")
    (old_upstream,) = re.findall(r"upstream fluksio_engine \{.*?\n\}\n", site, flags=re.DOTALL)
    site = _replace_once(site, old_upstream, upstream)
    indented = "\n".join(f"    {line}" if line else "" for line in directives.splitlines())
    return _replace_once(site, "    location / {", f"{indented}\n    location / {{")


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"docs/deploying.md's nginx block lost {old!r}"
    return text.replace(old, new)


@dataclass
class Nginx:
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def spooled(self) -> list[Path]:
        """Files nginx wrote to its temporary directories (a request or answer it buffered)."""
        return [p for name in TEMP_DIRS for p in (self.directory / name).rglob("*") if p.is_file()]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)  # graceful: finish, then exit
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_nginx(directory: Path, port: int, engine_port: int | list[int], pair: KeyPair) -> Nginx:
    """nginx on ``port`` in front of the engine on ``engine_port``, or of two engines of one
    database (a list of two ports) as the page's failover block says."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        message = "Debian's nginx is not installed (make test installs nginx-light as root)"
        cannot_run(message)
    directory.mkdir(parents=True, exist_ok=True)
    site = documented_config()
    site = _replace_once(site, "listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
    site = _for_engines(site, engine_port if isinstance(engine_port, list) else [engine_port])
    site = _replace_once(site, "/etc/ssl/fluksio/fullchain.pem", str(pair.cert))
    site = _replace_once(site, "/etc/ssl/fluksio/privkey.pem", str(pair.key))
    (directory / "fluksio.conf").write_text(site)
    temps = "\n".join(f"  {name}_temp_path {directory / name};" for name in TEMP_DIRS)
    (directory / "nginx.conf").write_text(
        f"{'user root;' if os.geteuid() == 0 else ''}\n"
        "daemon off;\nworker_processes 1;\n"
        f"pid {directory / 'nginx.pid'};\nerror_log {directory / 'error.log'} info;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n  access_log {directory / 'access.log'};\n{temps}\n"
        f"  include {directory / 'fluksio.conf'};\n}}\n"
    )
    process = subprocess.Popen(
        [binary, "-p", str(directory), "-c", str(directory / "nginx.conf"), "-e",
         str(directory / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=(directory / "stderr.log").open("wb"),
    )  # fmt: skip

    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"nginx exited: {(directory / 'error.log').read_text()}")
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=15, what="nginx to listen")
    return Nginx(port, directory, process)
