"""The SSH seam against real peers: a real OpenSSH login node, and one that says nothing.

Every test runs on both transports (asyncssh in the engine, and the system ``ssh`` with
its shared connection): they must fail alike, in the same sentences.

A command that does not answer in time is a timeout, reported once and never run again
(a hung ``sbatch`` may have queued a job: running it again would queue a second one); so
is one that must run once and whose connection dropped while it ran.
A peer that never sends an SSH banner fails within the connect timeout with a sentence.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncssh
import pytest

from fluksio.ssh import CONNECT_TIMEOUT_S
from fluksio.ssh.shell import TransportError
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.transports import both_transports, make_transport

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@both_transports
async def test_a_command_that_does_not_answer_in_time_is_run_once(
    slurm: LocalSlurm, tmp_path: Path, kind: str
) -> None:
    transport = make_transport(
        kind,
        slurm.login_with_port,
        slurm.key,
        shared=tmp_path / "ssh",
        known_hosts=slurm.known_hosts,
        command_timeout_s=1,
    )
    marker = f"fluksio-hung-{time.time_ns()}"  # in the login user's home
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as raised:
            await transport.run(["sh", "-c", f'echo x >> "{marker}"; sleep 30'])
        assert time.monotonic() - started < 10
        assert raised.value.detail == (
            f"{slurm.login_with_port}: sh did not answer within 1 s; it was not run again"
        )
        assert raised.value.may_have_run, "it may have acted: the caller looks, not reruns"
        counted = await transport.run(["sh", "-c", f'wc -l < "{marker}"; rm -f "{marker}"'])
        assert counted.stdout.strip() == "1", "the hung command ran exactly once"
    finally:
        await transport.close()


@both_transports
@pytest.mark.parametrize(("once", "runs"), [(True, 1), (False, 2)], ids=["once", "rerun"])
async def test_a_connection_lost_mid_command_is_not_rerun_when_it_must_run_once(
    slurm: LocalSlurm, once: bool, runs: int, kind: str, tmp_path: Path
) -> None:
    # Killing its own sshd session process drops the connection after the command acted.
    transport = make_transport(
        kind,
        slurm.login_with_port,
        slurm.key,
        shared=tmp_path / "ssh",
        known_hosts=slurm.known_hosts,
    )
    marker = f"fluksio-dropped-{time.time_ns()}"
    try:
        with pytest.raises(TransportError) as raised:
            await transport.run(
                ["sh", "-c", f'echo x >> "{marker}"; kill -KILL "$PPID"; sleep 10'], once=once
            )
        assert raised.value.may_have_run is once
        if once:
            detail = raised.value.detail
            assert detail.startswith(f"{slurm.login_with_port}: connection lost while sh ran (")
            assert detail.endswith("); it was not run again")
        counted = await transport.run(["sh", "-c", f'wc -l < "{marker}"; rm -f "{marker}"'])
        assert counted.stdout.strip() == str(runs)
    finally:
        await transport.close()


@both_transports
async def test_a_peer_that_sends_no_banner_fails_within_the_connect_timeout(
    tmp_path: Path, kind: str
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # held open, saying nothing

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    key = tmp_path / "key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    key.chmod(0o600)  # as OpenSSH insists
    known = tmp_path / "known_hosts"
    known.write_text("")
    # The engine waits CONNECT_TIMEOUT_S (15 s); the same path is taken here in 1.5 s.
    assert CONNECT_TIMEOUT_S == 15
    transport = make_transport(
        kind,
        f"user@127.0.0.1:{port}",
        str(key),
        shared=tmp_path / "ssh",
        known_hosts=str(known),
        connect_timeout_s=1.5,
    )
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as raised:
            await transport.run(["true"])
        assert 1.4 <= time.monotonic() - started <= 5
        assert raised.value.detail == (
            f"cannot reach user@127.0.0.1:{port}: no SSH handshake within 1.5 s"
            " (is it an SSH server, and up?)"
        )
        assert accepted, "it did connect; the peer just never spoke"
    finally:
        server.close()
        for writer in accepted:
            writer.close()
        await server.wait_closed()


@both_transports
async def test_a_key_file_that_is_no_key_is_a_sentence(tmp_path: Path, kind: str) -> None:
    key = tmp_path / "id_ed25519"
    key.write_text("this is a note, not a key\n")
    key.chmod(0o600)  # as a key's would be: this test is about what is in it
    known = tmp_path / "known_hosts"
    known.write_text("")
    transport = make_transport(
        kind, "user@127.0.0.1:9", str(key), shared=tmp_path / "ssh", known_hosts=str(known)
    )
    with pytest.raises(TransportError) as raised:
        await transport.run(["true"])
    assert raised.value.detail.startswith(f"user@127.0.0.1:9: ssh_key {key} cannot be read as")


async def test_openssh_says_a_key_others_may_read_is_refused_and_how_to_mend_it(
    tmp_path: Path,
) -> None:
    key = tmp_path / "id_ed25519"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(key))
    key.chmod(0o644)
    known = tmp_path / "known_hosts"
    known.write_text("")
    transport = make_transport(
        "openssh", "user@127.0.0.1:9", str(key), shared=tmp_path / "ssh", known_hosts=str(known)
    )
    with pytest.raises(TransportError) as raised:
        await transport.run(["true"])
    assert raised.value.detail == (
        f"user@127.0.0.1:9: ssh_key {key} may be read by others (mode 0644); OpenSSH refuses"
        f" such a key: chmod 600 {key}"
    )
