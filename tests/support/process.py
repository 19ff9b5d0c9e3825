"""A process a test started: stopped by its pid, its log readable, and liveness checks."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.wait import wait_for


def parent_of(pid: int) -> int:
    """The parent of a running process, from ``/proc`` (its name may hold ")")."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def connected_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP connection established to ``port`` on this
    machine (read from ``/proc``: its sockets' inodes, and the connections'
    table)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    return True
    return False


def long_poll(url: str, token: str) -> subprocess.Popen[bytes]:
    """A client holding ``GET url`` open (a long poll), in a process of its own: its
    token in its environment, never its argv. It ends when answered or cut."""
    asks = (
        "import os, urllib.request\n"
        f"ask = urllib.request.Request({url!r})\n"
        "ask.add_header('Authorization', 'Bearer ' + os.environ['POLL_TOKEN'])\n"
        "try:\n    urllib.request.urlopen(ask, timeout=90).read()\n"
        "except OSError:\n    pass\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", asks],
        env={**os.environ, "POLL_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def written_pid(pid_file: Path, *, timeout: float = 60) -> int:
    """The pid a call writes into ``pid_file`` as it starts, once it has."""
    written = wait_for(
        lambda: pid_file.read_text() if pid_file.exists() else None,
        timeout=timeout,
        what="the call to start",
    )
    return int(written)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    # ESRCH: it ended between opening its stat and reading it (seen on a loaded machine).
    except (FileNotFoundError, ProcessLookupError):
        return False


@dataclass
class ManagedProcess:
    process: subprocess.Popen[bytes]
    log_path: Path
    _stopped: bool = field(default=False, repr=False, kw_only=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def freeze(self) -> None:
        """SIGSTOP: the process does nothing until thawed (its children run on)."""
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 15) -> int:
        """Stop this process (by its pid) and return its exit code."""
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


def provisioned_processes(*, worker_only: bool = True) -> dict[int, str]:
    """This machine's workers started by a provisioner (or, not ``worker_only``, any
    process of theirs, ``prerun`` lines included): pid -> the request they carry."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = (entry / "environ").read_bytes().split(b"\0")
            marks = [v for v in environ if v.startswith(b"FLUKSIO_PROVISION_MARK=")]
            command = (entry / "cmdline").read_bytes()
            if marks and (b"fluksio-worker" in command or not worker_only):
                found[int(entry.name)] = marks[0].split(b"=", 2)[2].decode()
    return found
