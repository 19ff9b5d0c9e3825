"""The SSH transport as a user at a real site has it: their config, a bastion, their agent.

All against real OpenSSH servers on 127.0.0.1: the login node of ``make slurm-up``, and
a second ``sshd`` started here as the bastion (``ProxyJump``), whose log proves the hop.
``login`` is a ``Host`` alias of a config file; in the last test the key lives only in a
real ``ssh-agent``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.provisioners.shell import TransportError
from fluksio.provisioners.transport import SSHTransport
from tests.support.engine import free_port
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.wait import wait_for

SSHD = "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture
def bastion(tmp_path: Path, slurm: LocalSlurm) -> Iterator[tuple[int, Path, Path]]:
    """A second sshd that only forwards: (port, its log, its host key's known_hosts)."""
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("a second sshd needs root")
    directory = tmp_path / "bastion"
    directory.mkdir()
    key = directory / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    port = free_port()
    log = directory / "sshd.log"
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {key}\nPidFile {directory / 'pid'}\n"
        "AuthenticationMethods publickey\nPasswordAuthentication no\nUsePAM no\n"
        "AllowUsers hpcuser\nAllowTcpForwarding yes\nLogLevel DEBUG1\n"
    )
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=log.open("wb"))
    known = directory / "known_hosts"
    public = (directory / "host_key.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    wait_for(lambda: "Server listening" in log.read_text(), timeout=10, what="the bastion")
    yield port, log, known
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=10)


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(body)
    return path


async def _whoami(transport: SSHTransport) -> str:
    try:
        done = await transport.run(["sh", "-c", "echo $(id -un)@$(hostname)"])
    finally:
        await transport.close()
    assert done.ok, done
    return done.stdout.strip()


async def test_login_may_be_a_host_alias_of_the_users_config(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    config = _config(
        tmp_path,
        f"Host hpc\n  HostName 127.0.0.1\n  Port {slurm.port}\n  User {slurm.login.split('@')[0]}\n"
        f"  IdentityFile {slurm.key}\n  UserKnownHostsFile {slurm.known_hosts}\n",
    )
    who = await _whoami(SSHTransport("hpc", ssh_config=str(config)))
    assert who.startswith("hpcuser@")


async def test_a_proxyjump_bastion_is_used_and_its_log_shows_the_hop(
    tmp_path: Path, slurm: LocalSlurm, bastion: tuple[int, Path, Path]
) -> None:
    port, log, known = bastion
    both = tmp_path / "known_hosts"
    both.write_text(Path(slurm.known_hosts).read_text() + known.read_text())
    config = _config(
        tmp_path,
        f"Host jump\n  HostName 127.0.0.1\n  Port {port}\n  User hpcuser\n"
        f"  IdentityFile {slurm.key}\n  UserKnownHostsFile {both}\n"
        f"Host hpc\n  HostName 127.0.0.1\n  Port {slurm.port}\n  User hpcuser\n"
        f"  IdentityFile {slurm.key}\n  UserKnownHostsFile {both}\n  ProxyJump jump\n",
    )
    who = await _whoami(SSHTransport("hpc", ssh_config=str(config)))
    assert who.startswith("hpcuser@")
    seen = log.read_text()
    assert "Accepted publickey for hpcuser" in seen
    # The bastion opened the tunnel to the login node: the hop was used.
    assert f"to 127.0.0.1 port {slurm.port}" in seen, seen


async def test_a_key_held_only_by_the_ssh_agent_logs_in(
    tmp_path: Path, slurm: LocalSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        wait_for(socket_path.exists, timeout=10, what="the ssh-agent's socket")
        copy = tmp_path / "key"
        shutil.copy(slurm.key, copy)
        copy.chmod(0o600)
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(["ssh-add", "-q", str(copy)], env=env, check=True, capture_output=True)
        copy.unlink()  # from now on only the agent has it
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        monkeypatch.setenv("HOME", str(tmp_path))  # no default key files either
        transport = SSHTransport(slurm.login_with_port, known_hosts=slurm.known_hosts)
        assert (await _whoami(transport)).startswith("hpcuser@")
        monkeypatch.delenv("SSH_AUTH_SOCK")
        without = SSHTransport(slurm.login_with_port, known_hosts=slurm.known_hosts)
        with pytest.raises(TransportError, match="refused every key offered"):
            await _whoami(without)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
