"""A login node that asks for a TOTP code: logged in to once by a person, then shared.

The login node is a real ``sshd`` with PAM's ``pam_oath`` asking for a key *and* a code
(``tests/support/otp.py``); the engine is a real process using the ``openssh`` transport
against the real local Slurm. What a user sees: calls wait with ``login needed: run
'fluksio provisioners login hpc'`` and nothing pesters the login node; the person types
the code once in a terminal; the waiting call then runs in a Slurm job with no further
prompt; once the shared connection is closed, the profile says login is needed again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.engine import (
    BIN,
    EngineProcess,
    attach_url_on,
    free_port,
    start_engine,
    write_provisioners,
)
from tests.support.otp import OtpLoginNode, otp_login_node
from tests.support.runs import code, put_flow, start_run, wait_run
from tests.support.slurm import LocalSlurm, local_slurm
from tests.support.terminal import in_terminal
from tests.support.wait import wait_for

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("cluster")]

LOGIN_NEEDED = "login needed: run 'fluksio provisioners login hpc'"
NODE = code(
    """
    import os

    def process():
        return {"job": os.environ.get("SLURM_JOB_ID")}
    """
)


@pytest.fixture
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture
def node(tmp_path: Path, slurm: LocalSlurm) -> Iterator[OtpLoginNode]:
    with otp_login_node(tmp_path / "otp", slurm.login.split("@")[0]) as started:
        yield started


@pytest.fixture
def data_dir(tmp_path: Path, slurm: LocalSlurm, node: OtpLoginNode) -> Iterator[Path]:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    yield data
    # Whatever the test left open (a person's login) is closed, and queued jobs cancelled.
    fluksio("provisioners", "logout", "hpc", "--data-dir", str(data))
    slurm.cancel_leftovers(tmp_path)


def _write_config(data: Path, slurm: LocalSlurm, node: OtpLoginNode, port: int) -> None:
    entry: dict[str, Any] = {
        "type": "slurm",
        "name": "hpc",
        "transport": "openssh",
        "login": f"{slurm.login.split('@')[0]}@127.0.0.1:{node.port}",
        "ssh_key": slurm.key,
        "known_hosts": str(node.known_hosts),
        "engine_url": attach_url_on(port),
        "worker_command": slurm.worker,
        "max_idle_s": 2,
        "provision_timeout_s": 60,
        "poll_interval_s": 0.3,
        "profiles": [{"name": "small", "cpus": 1, "ram_mb": 300, "labels": ["hpc"]}],
    }
    write_provisioners(data, [entry])


def _profile(engine: EngineProcess, token: str) -> dict[str, Any]:
    body = engine.client(token).request("GET", "/workers/resources").body
    (profile,) = body["provisioners"][0]["profiles"]
    profile["queued"] = body["queued"]
    result: dict[str, Any] = profile
    return result


def _waits_for_login(engine: EngineProcess, token: str) -> dict[str, Any] | None:
    profile = _profile(engine, token)
    reasons = [q["reason"] for q in profile["queued"]]
    if (
        profile["login_needed"] == LOGIN_NEEDED
        and f"provisioning hpc/small, {LOGIN_NEEDED}" in reasons
    ):
        return profile
    return None


def test_a_code_is_typed_once_then_the_engine_submits_through_that_login(
    tmp_path: Path, slurm: LocalSlurm, node: OtpLoginNode, data_dir: Path
) -> None:
    port = free_port()
    _write_config(data_dir, slurm, node, port)
    engine = start_engine(data_dir, tmp_path / "logs", port=port)
    try:
        token = engine.login()
        assert put_flow(engine, token, "on-hpc", [{"id": "n", "worker": "hpc", "code": NODE}])
        first = start_run(engine, token, "on-hpc")["id"]
        # Nobody has logged in: the call waits, saying what to run, and the node is asked
        # once (the engine's own key-only attempt), not once per poll.
        waiting = wait_for(lambda: _waits_for_login(engine, token), timeout=30, what="login needed")
        assert waiting["failures"] == 0 and waiting["jobs"] == []
        asked = node.connections()
        rests = {waiting["retry_at"]}

        def rested_four_more_times() -> bool:
            rests.add(_profile(engine, token)["retry_at"])
            return len(rests) > 4

        wait_for(
            rested_four_more_times,
            timeout=30,
            what="four more rests of the profile",
        )
        assert node.connections() == asked, "nothing reached the login node meanwhile"
        refused = fluksio("provisioners", "check", "--ssh", "--data-dir", str(data_dir))
        assert refused.returncode == 2
        assert refused.stderr.strip().endswith(f"; {LOGIN_NEEDED}"), refused.stderr

        # A person logs in at a terminal and types the code the login node asks for.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
        status, shown = in_terminal(
            [str(BIN / "fluksio"), "provisioners", "login", "hpc", "--data-dir", str(data_dir)],
            [("One-time password", node.code)],
            env=env,
        )
        assert status == 0, shown
        assert "hpc: logged in" in shown

        # The waiting call now runs in a Slurm job; nothing asks for a code again.
        run = wait_run(engine, token, first, timeout=90)
        assert run["state"] == "succeeded", run
        assert run["nodes"][0]["provenance"]["slurm_job_id"] == run["nodes"][0]["result"]["job"]
        assert node.log.read_text().count("Accepted keyboard-interactive/pam") == 1
        checked = fluksio("provisioners", "check", "--ssh", "--data-dir", str(data_dir))
        assert checked.returncode == 0, checked.stderr
        assert "transport: openssh" in checked.stdout
        assert "(open)" in checked.stdout and "hpc: access works" in checked.stdout

        # Logging in again while the connection is open asks nothing and opens nothing.
        before = node.connections()
        again = fluksio("provisioners", "login", "hpc", "--data-dir", str(data_dir))
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("hpc: already logged in")
        assert node.connections() == before

        # The shared connection closes (here by logout; a dropped network is the same).
        closed = fluksio("provisioners", "logout", "hpc", "--data-dir", str(data_dir))
        assert closed.stdout.strip() == "hpc: logged out", closed
        wait_for(
            lambda: not _profile(engine, token)["workers"],
            timeout=60,
            what="the first job's worker to idle out",
        )
        second = start_run(engine, token, "on-hpc")["id"]
        wait_for(lambda: _waits_for_login(engine, token), timeout=30, what="login needed again")
        assert engine.client(token).request("GET", f"/runs/{second}").body["state"] == "queued"
    finally:
        engine.stop()


def test_login_says_when_a_provisioner_cannot_share_a_login(
    tmp_path: Path, slurm: LocalSlurm, node: OtpLoginNode, data_dir: Path
) -> None:
    _write_config(data_dir, slurm, node, free_port())
    config = json.loads((data_dir / "provisioners.json").read_text())
    config[0]["transport"] = "asyncssh"
    (data_dir / "provisioners.json").write_text(json.dumps(config))
    done = fluksio("provisioners", "login", "hpc", "--data-dir", str(data_dir))
    assert done.returncode == 2
    assert 'cannot share a login; set "transport": "openssh"' in done.stderr
    unknown = fluksio("provisioners", "login", "nope", "--data-dir", str(data_dir))
    assert unknown.returncode == 2
    assert "no provisioner named 'nope'" in unknown.stderr and "(configured: hpc)" in unknown.stderr
