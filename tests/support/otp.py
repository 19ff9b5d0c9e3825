"""A login node that asks for a key *and* a TOTP code, as national HPC centres do.

A second ``sshd`` on 127.0.0.1 with ``AuthenticationMethods publickey,keyboard-interactive``
and PAM's ``pam_oath`` (Debian's ``libpam-oath``); ``oathtool`` makes the codes. sshd names
its PAM service after the name it was started under, so it runs through a link named
``fluksio-otp-<port>`` and gets a PAM file of its own: the system's ``sshd`` service is
never touched. Needs root (PAM and sshd); under ``CI=true`` a missing piece fails.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.ci import cannot_run
from tests.support.engine import free_port
from tests.support.wait import wait_for

__all__ = ["OtpLoginNode", "otp_login_node"]

SSHD = Path("/usr/sbin/sshd")
PAM_OATH = Path("/lib/x86_64-linux-gnu/security/pam_oath.so")
PAM_DIR = Path("/etc/pam.d")


@dataclass(frozen=True)
class OtpLoginNode:
    port: int
    known_hosts: Path
    log: Path
    secret: str
    """The user's TOTP secret, in hex, as ``oathtool`` takes it."""

    def code(self, ahead_s: int = 0) -> str:
        """The code an authenticator app would show now (or ``ahead_s`` from now)."""
        argv = ["oathtool", "--totp"]
        if ahead_s:
            argv += ["-N", f"now + {ahead_s} seconds"]
        done = subprocess.run([*argv, self.secret], capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def connections(self) -> int:
        """How many TCP connections the node has accepted so far."""
        return self.log.read_text().count("Connection from 127.0.0.1")


def _needs(what: str) -> None:
    message = f"the one-time-code login node needs {what}"
    cannot_run(message)


@contextlib.contextmanager
def otp_login_node(directory: Path, user: str) -> Iterator[OtpLoginNode]:
    """Start the node for ``user`` (whose authorized_keys the Slurm login node set up)."""
    if os.geteuid() != 0:
        _needs("root (sshd with PAM)")
    if not PAM_OATH.exists() or shutil.which("oathtool") is None:
        _needs("libpam-oath and oathtool (make slurm-up installs them)")
    directory.mkdir(mode=0o700, exist_ok=True)
    port = free_port()
    service = f"fluksio-otp-{port}"
    host_key = directory / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    secret = secrets.token_hex(20)
    users = directory / "users.oath"
    users.write_text(f"HOTP/T30 {user} - {secret}\n")
    users.chmod(0o600)
    pam_file = PAM_DIR / service
    pam_file.write_text(
        f"# written by the Fluksio tests; removed when they end\n"
        f"auth required pam_oath.so usersfile={users} window=2 digits=6\n"
        "account required pam_permit.so\nsession required pam_permit.so\n"
    )
    link = directory / service
    link.symlink_to(SSHD)
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {directory / 'pid'}\n"
        "UsePAM yes\nKbdInteractiveAuthentication yes\nPasswordAuthentication no\n"
        "AuthenticationMethods publickey,keyboard-interactive\n"
        f"AllowUsers {user}\nAllowTcpForwarding no\nLogLevel VERBOSE\nMaxStartups 100\n"
    )
    log = directory / "sshd.log"
    process = subprocess.Popen([str(link), "-D", "-e", "-f", str(config)], stderr=log.open("wb"))
    try:
        known = directory / "known_hosts"
        public = (directory / "host_key.pub").read_text().split()
        known.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
        wait_for(lambda: "Server listening" in log.read_text(), timeout=10, what="the OTP sshd")
        yield OtpLoginNode(port=port, known_hosts=known, log=log, secret=secret)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        pam_file.unlink(missing_ok=True)
