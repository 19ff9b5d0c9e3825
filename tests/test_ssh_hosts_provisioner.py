"""The SSH hosts provisioner against scripted replies of its hosts' shells: what it sends,
how it reads each answer, what it keeps. ``tests/test_ssh_hosts.py`` runs it for real."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from fluksio.engine.provisioning import Configured
from fluksio.errors import ConfigError
from fluksio.provisioners.base import JobState, JobStatus, ProvisionError
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.hosts import HostsProvisioner, HostsSettings
from fluksio.provisioners.plugins import build_plugins
from fluksio.provisioners.testing import ScriptedShell
from fluksio.ssh.shell import Completed
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, start_in_process
from tests.support.scripted import listening_at
from tests.support.wait import poll_async

ENTRY: dict[str, Any] = {
    "type": "ssh",
    "name": "boxes",
    "engine_url": "wss://engine.example/api/v1/workers/attach",
    "ssh_key": "/secrets/boxes_ed25519",
    "hosts": [
        {"name": "gpu-box-1", "login": "me@gpu-box-1", "labels": ["gpu"], "cpus": 16,
         "gpus": 2, "ram_mb": 65536, "prerun": ["source ~/venvs/fluksio/bin/activate"]},
        {"name": "cpu-box", "login": "me@cpu-box", "labels": ["cpu"], "cpus": 4},
    ],
}  # fmt: skip


def _provisioner(
    tmp_path: Path, *replies: tuple[int, str, str] | Exception
) -> tuple[HostsProvisioner, ScriptedShell]:
    shell = ScriptedShell(*replies)
    hosts = HostsProvisioner(
        HostsSettings.model_validate(ENTRY), {"gpu-box-1": shell, "cpu-box": shell}
    )
    hosts.state_dir = tmp_path / "state"
    return hosts, shell


def test_the_file_names_the_host_at_fault(tmp_path: Path) -> None:
    path = tmp_path / "provisioners.json"
    bad = {**ENTRY, "hosts": [{**ENTRY["hosts"][0], "max_workers": 2}]}
    path.write_text(__import__("json").dumps([bad]))
    with pytest.raises(ConfigError) as raised:
        load_provisioners(path, build_plugins().provisioner_types())
    assert raised.value.detail == (
        f"{path}: provisioner 'boxes', host 'gpu-box-1', field max_workers: Value error, a"
        " host runs one worker: max_workers must be 1 (or left out)"
    )


async def test_a_start_sends_the_token_on_stdin_and_keeps_the_worker(tmp_path: Path) -> None:
    hosts, shell = _provisioner(tmp_path, (0, "4242 987654\n", ""))
    submitted = await hosts.submit(hosts.profile("gpu-box-1"), request_id="r1", token="SECRET")
    assert submitted.job_id == "gpu-box-1:4242"
    ((argv, stdin),) = shell.sent
    assert argv[:2] == ("sh", "-c")
    assert argv[3:] == ("fluksio-start", ".fluksio/tokens/r1", "", "r1")
    assert "SECRET" not in " ".join(argv) and shell.once == [True]
    assert stdin is not None
    token_line, script = stdin.split("\n", 1)
    assert token_line == "SECRET" and script == hosts.render(
        hosts.profile("gpu-box-1"), request_id="r1"
    )
    # The mark comes first, so what a prerun line starts carries it and a stop finds it.
    assert script.splitlines()[1:3] == [
        "export FLUKSIO_PROVISION_MARK=fluksio-request=r1",
        "source ~/venvs/fluksio/bin/activate",
    ]
    assert script.endswith(
        " --name boxes-gpu-box-1 --labels gpu --max-idle 300 --parallel 16 --cpus 16 --gpus 2"
        " --ram-mb 65536\n"
    )
    assert (tmp_path / "state" / "workers").read_text() == "gpu-box-1:4242\n"


async def test_a_host_that_cannot_start_a_worker_says_why_in_its_words(tmp_path: Path) -> None:
    hosts, _shell = _provisioner(tmp_path, (1, "", "setsid: command not found\n"))
    with pytest.raises(ProvisionError, match="cpu-box did not start a worker: setsid: command"):
        await hosts.submit(hosts.profile("cpu-box"), request_id="r1", token="t")


async def test_a_poll_reads_each_host_once_and_says_what_a_gone_worker_said(
    tmp_path: Path,
) -> None:
    hosts, shell = _provisioner(
        tmp_path, (0, "11 running \n", ""), (0, "22 gone fluksio-worker: command not found\n", "")
    )
    statuses = await hosts.poll(["gpu-box-1:11", "cpu-box:22", "nonsense"])
    assert statuses == {
        "gpu-box-1:11": JobStatus(JobState.RUNNING, "RUNNING"),
        "cpu-box:22": JobStatus(JobState.COMPLETED, "EXITED", "fluksio-worker: command not found"),
    }
    assert [sent[0][4:] for sent in shell.sent] == [("11",), ("22",)]
    assert (tmp_path / "state" / "workers").read_text() == "gpu-box-1:11\n"


async def test_a_restarted_engine_finds_its_workers_and_stops_them_when_it_stops(
    tmp_path: Path,
) -> None:
    hosts, shell = _provisioner(tmp_path, (0, "r1 4242\nother 77\n", ""), (0, "", ""), (0, "", ""))
    assert await hosts.find(["r1"]) == {"r1": "gpu-box-1:4242"}
    assert len(shell.sent) == 1, "found on the first host: the second is not asked"
    # Another instance on the same state (an engine SIGKILLed, then started again).
    again = HostsProvisioner(hosts.settings, {"gpu-box-1": shell, "cpu-box": shell})
    again.state_dir = hosts.state_dir
    again.start(listening_at(8080))  # the engine's own instance: started by its provisioning
    await again.close()
    assert shell.sent[1][0][3:] == ("fluksio-stop", "", "4242")
    assert (tmp_path / "state" / "workers").read_text() == ""


class HeldShell(ScriptedShell):
    """A host's shell whose first command (the start) answers only once released."""

    def __init__(self, *replies: tuple[int, str, str]) -> None:
        super().__init__(*replies)
        self.release = asyncio.Event()

    async def run(
        self, argv: Sequence[str], stdin: str | None = None, *, once: bool = False
    ) -> Completed:
        if not self.sent:
            self.sent.append((tuple(argv), stdin))
            await self.release.wait()
            self.sent.pop()
        return await super().run(argv, stdin, once=once)


async def test_a_waiting_call_names_the_host_its_worker_starts_on(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # The start, then the stop at the engine's shutdown.
    shell = HeldShell((0, "4242 987654\n", ""), (0, "", ""), (0, "", ""))
    hosts = HostsProvisioner(HostsSettings.model_validate(ENTRY), {"cpu-box": shell})
    api = await start_in_process(
        aiohttp_client,
        tmp_path / "data",
        provisioners=Configured(build_plugins(), [hosts]),
        clock=ManualClock(),
    )
    await api.put_flow(
        "cpu", [{"id": "n", "code": "def process():\n    return 1\n", "worker": "cpu"}]
    )
    await api.start_run("cpu")

    def said(expected: str) -> Callable[[], Awaitable[bool]]:
        async def reason() -> bool:
            queued = (await api.request("GET", "/workers/resources")).body["queued"]
            return bool(queued) and queued[0]["reason"] == expected

        return reason

    await poll_async(
        said("provisioning boxes/cpu-box, starting a worker on cpu-box"),
        timeout=5,
        what="the host named while its worker starts",
    )
    shell.release.set()
    await poll_async(
        said("provisioning boxes/cpu-box, worker cpu-box:4242 submitted"),
        timeout=5,
        what="the started worker named by host and pid",
    )


def test_a_host_with_no_route_out_dials_its_own_loopback_and_has_no_login_address(
    tmp_path: Path,
) -> None:
    hosts = HostsProvisioner(HostsSettings.model_validate({**ENTRY, "route": "login"}))
    script = hosts.render(hosts.profile("cpu-box"), request_id="r1")
    assert script.splitlines()[-1].endswith(" --connect-to 127.0.0.1:PORT"), script
    assert hosts.reach() == (
        "through its own SSH connection, on its loopback, verifying"
        " wss://engine.example/api/v1/workers/attach"
    )
    path = tmp_path / "provisioners.json"
    path.write_text(json.dumps([{**ENTRY, "route": "login", "login_address": "gw"}]))
    with pytest.raises(ConfigError, match="an SSH host has no login node"):
        load_provisioners(path, build_plugins().provisioner_types())


async def test_closing_an_instance_that_only_checked_stops_no_running_worker(
    tmp_path: Path,
) -> None:
    # What `fluksio provisioners check --ssh` does on the engine's data directory.
    found = (0, "/usr/bin/fluksio-worker\n", "")
    hosts, shell = _provisioner(tmp_path, found, found)
    assert hosts.state_dir is not None
    hosts.state_dir.mkdir(parents=True)
    (hosts.state_dir / "workers").write_text("cpu-box:4242\n")  # the engine's, running
    await hosts.check()
    await hosts.close()
    assert [argv[3] for argv, _stdin in shell.sent] == ["fluksio-check"] * 2, "no stop sent"
    assert (hosts.state_dir / "workers").read_text() == "cpu-box:4242\n"
