"""The SSH transport as a user at a real site has it: their config, a bastion, their agent.

All against real OpenSSH servers on 127.0.0.1: the login node of ``make slurm-up``, and
a second ``sshd`` started here as the bastion (``ProxyJump``), whose log proves the hop.
``login`` is a ``Host`` alias of a config file; in the last test the key lives only in a
real ``ssh-agent``. Each runs on both transports (asyncssh, and the system ``ssh``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.ssh import OpenSSHTransport
from fluksio.ssh.shell import RemoteShell, TransportError
from tests.support.engine import free_port
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.transports import both_transports, make_transport
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

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


async def _whoami(transport: RemoteShell) -> str:
    try:
        done = await transport.run(["sh", "-c", "echo $(id -un)@$(hostname)"])
    finally:
        await transport.close()
    assert done.ok, done
    return done.stdout.strip()


@both_transports
async def test_login_may_be_a_host_alias_of_the_users_config(
    tmp_path: Path, slurm: LocalSlurm, kind: str
) -> None:
    config = _config(
        tmp_path,
        f"Host hpc\n  HostName 127.0.0.1\n  Port {slurm.port}\n  User {slurm.login.split('@')[0]}\n"
        f"  IdentityFile {slurm.key}\n  UserKnownHostsFile {slurm.known_hosts}\n",
    )
    transport = make_transport(kind, "hpc", shared=tmp_path / "ssh", ssh_config=str(config))
    route = await transport.describe()
    assert route.destination == f"hpcuser@127.0.0.1:{slurm.port}"
    assert any(entry.startswith("Host hpc (") for entry in route.entries), route
    assert (await _whoami(transport)).startswith("hpcuser@")


@both_transports
async def test_a_proxyjump_bastion_is_used_and_its_log_shows_the_hop(
    tmp_path: Path, slurm: LocalSlurm, bastion: tuple[int, Path, Path], kind: str
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
    transport = make_transport(kind, "hpc", shared=tmp_path / "ssh", ssh_config=str(config))
    assert (await transport.describe()).jump == "jump"
    assert (await _whoami(transport)).startswith("hpcuser@")
    seen = log.read_text()
    assert "Accepted publickey for hpcuser" in seen
    # The bastion opened the tunnel to the login node: the hop was used.
    assert f"to 127.0.0.1 port {slurm.port}" in seen, seen


@both_transports
async def test_a_key_held_only_by_the_ssh_agent_logs_in(
    tmp_path: Path, slurm: LocalSlurm, monkeypatch: pytest.MonkeyPatch, kind: str
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
        login, known = slurm.login_with_port, slurm.known_hosts
        transport = make_transport(kind, login, shared=tmp_path / "ssh", known_hosts=known)
        assert (await _whoami(transport)).startswith("hpcuser@")
        monkeypatch.delenv("SSH_AUTH_SOCK")
        without = make_transport(kind, login, shared=tmp_path / "ssh2", known_hosts=known)
        with pytest.raises(TransportError, match="refused every key offered"):
            await _whoami(without)
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def _master_running(argv: list[str]) -> bool:
    """Whether a master holds the socket ``argv`` (a login_argv) names."""
    check = [*argv[: argv.index("-M")], "-O", "check", "--", argv[-1]]
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


async def test_openssh_commands_share_one_connection_and_close_ends_only_its_own(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    shared = tmp_path / "state" / "ssh"
    login, key, known = slurm.login_with_port, slurm.key, slurm.known_hosts
    transport = OpenSSHTransport(login, key, known_hosts=known, control_path=shared)
    seen = set()
    for _ in range(3):
        done = await transport.run(["sh", "-c", 'echo "$SSH_CONNECTION"'])
        seen.add(done.stdout.strip())
    assert len(seen) == 1, f"one TCP connection for every command: {seen}"
    assert shared.is_socket() and (shared.parent.stat().st_mode & 0o777) == 0o700
    argv = transport.login_argv()
    assert argv is not None
    await transport.close()
    assert not _master_running(argv), "the master the engine opened is closed with it"
    # A person's login (here a key is enough: no prompt) outlives the engine's close.
    subprocess.run(argv, stdin=subprocess.DEVNULL, check=True, timeout=30)
    try:
        again = OpenSSHTransport(login, key, known_hosts=known, control_path=shared)
        assert (await again.run(["true"])).ok
        await again.close()
        assert _master_running(argv), "a person's login is left for the next engine"
    finally:
        subprocess.run([*argv[: argv.index("-M")], "-O", "exit", "--", argv[-1]], check=False)


async def test_openssh_moves_a_socket_path_too_long_for_unix_to_a_short_private_one(
    tmp_path: Path, slurm: LocalSlurm
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "ssh"
    transport = OpenSSHTransport(
        slurm.login_with_port, slurm.key, known_hosts=slurm.known_hosts, control_path=deep
    )
    try:
        assert (await transport.run(["true"])).ok
        route = await transport.describe()
        assert route.shared is not None and route.shared.endswith("(open)")
        socket_path = Path(route.shared.split(" ")[0])
        assert len(str(socket_path)) < 90 and socket_path.is_socket()
        assert socket_path.parent.name == f"fluksio-ssh-{os.getuid()}"
        assert (socket_path.parent.stat().st_mode & 0o777) == 0o700
    finally:
        await transport.close()
