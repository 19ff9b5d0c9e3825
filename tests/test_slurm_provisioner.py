"""The Slurm provisioner's life cycle against scripted replies of a remote shell.

``SlurmProvisioner`` takes its remote shell as an argument, so what it sends and how it
reads each answer (job ids, ``sbatch`` refusals, ``squeue`` tables, a login node that does
not answer) is tested here as dask-jobqueue tests its job classes, in milliseconds.
tests/test_slurm.py runs the same code against a real Slurm over real SSH.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fluksio.provisioners.base import JobState, JobStatus, ProvisionError
from fluksio.provisioners.slurm import SlurmProvisioner, SlurmSettings
from fluksio.provisioners.testing import ScriptedShell
from fluksio.ssh.shell import TransportError
from tests.support.scripted import listening_at
from tests.support.wait import async_wait_for

EXAMPLE = Path(__file__).resolve().parent.parent / "provisioners.example.json"


def _provisioner(
    *replies: tuple[int, str, str] | Exception, **changes: Any
) -> tuple[SlurmProvisioner, Any]:
    settings = SlurmSettings.model_validate({**json.loads(EXAMPLE.read_text())[0], **changes})
    shell = ScriptedShell(*replies)
    return SlurmProvisioner(settings, shell), shell


async def test_a_ca_file_travels_on_stdin_beside_the_token_and_the_script_names_it(
    tmp_path: Path,
) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n")
    slurm, shell = _provisioner((0, "7\n", ""), ca_file=str(pem))
    profile = slurm.profile("gpu-small")
    await slurm.submit(profile, request_id="r2", token="SECRET-TOKEN")
    ((argv, stdin),) = shell.sent
    assert argv[-2:] == (".fluksio/tokens/r2", ".fluksio/ca/hpc.pem")
    token_line, ca_line, script = stdin.split("\n", 2)
    assert token_line == "SECRET-TOKEN"
    assert base64.b64decode(ca_line) == pem.read_bytes()
    assert script == slurm.render(profile, request_id="r2")
    assert 'export FLUKSIO_WORKER_CA_FILE="$HOME"/.fluksio/ca/hpc.pem\n' in script
    assert "BEGIN CERTIFICATE" not in script + " ".join(argv), "named, never printed"
    note = tmp_path / "note.txt"
    note.write_text("not a certificate\n")
    with pytest.raises(ValidationError, match="holds no PEM certificate"):
        _provisioner(ca_file=str(note))
    with pytest.raises(ValidationError, match="cannot be read"):
        _provisioner(ca_file=str(tmp_path / "missing.pem"))


async def test_submit_sends_the_token_on_stdin_and_reads_the_job_id() -> None:
    slurm, shell = _provisioner((0, "4242;cluster\n", ""))
    profile = slurm.profile("gpu-small")
    submitted = await slurm.submit(profile, request_id="r1", token="SECRET-TOKEN")
    assert submitted.job_id == "4242" and submitted.profile == "gpu-small"
    ((argv, stdin),) = shell.sent
    assert "SECRET-TOKEN" not in " ".join(argv), "never in argv"
    assert argv[-2:] == (".fluksio/tokens/r1", ""), "the token's file; no CA to write"
    assert stdin is not None
    token_line, script = stdin.split("\n", 1)
    assert token_line == "SECRET-TOKEN"
    assert script == slurm.render(profile, request_id="r1")
    assert "#SBATCH --comment=fluksio-request=r1\n" in script, "marked with its request"
    assert shell.once == [True], "a submission is never sent twice by the transport"


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            (1, "", "sbatch: error: invalid partition specified: gpu\n"),
            "sbatch refused the job: invalid partition specified: gpu",
        ),
        (
            (1, "", "sbatch: error: Batch job submission failed: Invalid account\n"),
            "sbatch refused the job: Batch job submission failed: Invalid account",
        ),
        (
            (127, "", "sh: 1: sbatch: not found\n"),
            "sbatch refused the job: sh: 1: sbatch: not found",
        ),
        ((0, "Submitted batch job 12\n", ""), "not a job id"),
        (TransportError("cannot reach hpc@login: Connection refused"), "Connection refused"),
        (
            TransportError("hpc@login: sh did not answer within 60 s", may_have_run=True),
            "did not answer within 60 s",
        ),
    ],
    ids=["bad-partition", "bad-account", "no-sbatch", "not-parsable", "unreachable", "timeout"],
)
async def test_a_refused_or_unanswered_submission_is_one_error_in_slurms_words(
    reply: tuple[int, str, str] | Exception, said: str
) -> None:
    slurm, _shell = _provisioner(reply)
    with pytest.raises(ProvisionError) as raised:
        await slurm.submit(slurm.profile("gpu-small"), request_id="r1", token="t")
    assert said in raised.value.detail
    assert "t\n" not in raised.value.detail
    # Only a lost answer may have queued a job: the engine then looks for it.
    unanswered = isinstance(reply, TransportError) and reply.may_have_run
    assert raised.value.uncertain is unanswered


async def test_poll_reads_one_squeue_for_all_jobs_and_leaves_out_the_gone() -> None:
    table = (
        "41|PENDING|Priority|fluksio-request=a\n42|RUNNING|None|(null)\n"
        "43|CANCELLED|None|a|b|c\n99|PENDING|Resources|\n"
    )
    slurm, shell = _provisioner((0, table, ""))
    statuses = await slurm.poll(["41", "42", "43", "44"])
    assert statuses == {
        "41": JobStatus(JobState.PENDING, "PENDING", "Priority"),
        "42": JobStatus(JobState.RUNNING, "RUNNING"),
        "43": JobStatus(JobState.CANCELLED, "CANCELLED"),
    }, "44 left the queue; 99 is not ours to report"
    ((argv, _stdin),) = shell.sent
    assert argv[:2] == ("squeue", "--me")
    assert await slurm.poll([]) == {}, "nothing to ask, nothing sent"
    assert len(shell.sent) == 1


async def test_a_failed_squeue_is_an_error_with_its_words() -> None:
    slurm, _shell = _provisioner(
        (1, "", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    )
    with pytest.raises(ProvisionError, match="squeue: slurm_load_jobs error: Unable to contact"):
        await slurm.poll(["41"])


async def test_site_limits_reads_the_accounting_and_the_partitions_in_two_commands() -> None:
    # The example's profile: --partition=gpu --time=04:00:00, no account or QOS named.
    accounting = "assoc|physics|physics||normal|||\nqos|normal|||3\n"
    sinfo = "debug* up 1 idle infinite\ngpu up 2 idle 2:00:00\n"
    slurm, shell = _provisioner((0, accounting, ""), (0, sinfo, ""))
    (limit,) = (await slurm.site_limits()).values()
    assert limit.most_jobs == 3 and "QOS 'normal' allows 3 jobs per user" in limit.why_most
    assert limit.refused == (
        "profile 'gpu-small' asks for jobs of 04:00:00, longer than partition 'gpu'"
        " (02:00:00) allows; ask for less, or name another partition"
    )
    assert [argv[-1] for argv, _stdin in shell.sent] == ["fluksio-sacctmgr", "%P %a %D %t %l"]
    # slurmdbd down for a moment: an error, so that the last reading stands.
    slurm, _shell = _provisioner((0, "off|sacctmgr: error: Problem talking to the database\n", ""))
    with pytest.raises(ProvisionError, match="Problem talking to the database"):
        await slurm.site_limits()


async def test_find_reads_the_marks_of_this_users_jobs() -> None:
    table = (
        "41|PENDING|Priority|fluksio-request=r1\n"
        "42|RUNNING|None|fluksio-request=r2\n"
        "43|PENDING|None|my own comment | with bars\n"
        "44|PENDING|None|fluksio-request=\n"
    )
    slurm, shell = _provisioner((0, table, ""))
    assert await slurm.find(["r1", "r3", ""]) == {"r1": "41"}
    assert shell.sent[0][0][:2] == ("squeue", "--me")
    assert await slurm.find([]) == {}
    assert len(shell.sent) == 1


@pytest.mark.parametrize("job_id", ["51", None], ids=["job", "no-job-found"])
async def test_cancel_removes_the_token_file_named_by_the_request(job_id: str | None) -> None:
    # Nothing is remembered in memory: a restarted engine passes the request id it kept.
    slurm, shell = _provisioner((0, "", ""))
    await slurm.cancel(job_id, request_id="r9")
    ((argv, _stdin),) = shell.sent
    assert argv[0] == "sh" and argv[-2:] == (job_id or "", ".fluksio/tokens/r9")


async def test_a_refused_scancel_and_an_unreachable_login_node_are_errors() -> None:
    slurm, shell = _provisioner(
        (1, "", "scancel: error: Kill job error on job id 5: Access/permission denied\n"),
        TransportError("cannot reach hpc@login: Connection refused"),
    )
    with pytest.raises(ProvisionError, match=r"scancel 5: .*Access/permission denied"):
        await slurm.cancel("5", request_id="r5")
    with pytest.raises(ProvisionError, match="cannot reach hpc@login: Connection refused"):
        await slurm.check()
    await slurm.close()
    assert shell.closed


def test_the_login_route_is_chosen_per_provisioner_and_its_address_checked() -> None:
    slurm, _shell = _provisioner(route="login", login_address="login1-ib.cluster")
    script = slurm.render(slurm.profile("gpu-small"), request_id="r1")
    worker_line = script.splitlines()[-1]
    assert worker_line.endswith(" --connect-to login1-ib.cluster:PORT"), worker_line
    direct, _ = _provisioner()
    assert "--connect-to" not in direct.render(direct.profile("gpu-small"), request_id="r1")
    with pytest.raises(ValidationError, match='login_address is used only with "route": "login"'):
        _provisioner(login_address="login1")
    with pytest.raises(ValidationError, match="route"):
        _provisioner(route="tunnel")
    with pytest.raises(ValidationError, match="login_address"):
        _provisioner(route="login", login_address="login1; rm -rf ~")


async def test_a_shell_that_cannot_forward_cannot_carry_the_login_route() -> None:
    slurm, shell = _provisioner(route="login")
    with pytest.raises(ProvisionError, match="needs an SSH transport that forwards"):
        await slurm.submit(slurm.profile("gpu-small"), request_id="r1", token="t")
    assert shell.sent == [], "nothing submitted without a way in"


class ForwardingShell(ScriptedShell):
    """A scripted login node that also forwards and runs the relay: the relay says it
    listens, then holds until it is stopped (its input ended)."""

    def __init__(self, *replies: tuple[int, str, str] | Exception, needs_login: bool = False):
        super().__init__(*replies)
        self.forwards: list[int] = []
        self.relays: list[ScriptedRelay] = []
        self.needs_login = needs_login

    async def forward_remote(self, host: str, port: int) -> int:
        self.forwards.append(40000 + len(self.forwards))
        return self.forwards[-1]

    async def cancel_forward(self, remote_port: int, host: str, port: int) -> None:
        self.forwards.remove(remote_port)

    async def start(self, argv: Sequence[str], stdin: bytes) -> ScriptedRelay:
        relay = ScriptedRelay(int(argv[argv.index("fluksio-relay") + 2]) or 45678)
        self.relays.append(relay)
        return relay

    async def login_needed(self) -> bool:
        return self.needs_login

    async def logged_in(self) -> bool:
        return not self.needs_login

    async def logout(self) -> bool:
        return False

    def login_argv(self) -> list[str] | None:
        return ["ssh", "login"]


class ScriptedRelay:
    def __init__(self, port: int) -> None:
        self.lines = [f"listening {port}\n".encode()]
        self.stopped = asyncio.Event()

    async def readline(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        await self.stopped.wait()
        return b""

    async def write(self, data: bytes) -> None:
        pass

    async def stop(self) -> str:
        self.stopped.set()
        return ""


def _routed(
    *replies: tuple[int, str, str], **shell: Any
) -> tuple[SlurmProvisioner, ForwardingShell]:
    settings = SlurmSettings.model_validate(
        {**json.loads(EXAMPLE.read_text())[0], "route": "login", "login_address": "login1-ib"}
    )
    forwarding = ForwardingShell(*replies, **shell)
    slurm = SlurmProvisioner(settings, forwarding)
    slurm.start(listening_at(8443))
    return slurm, forwarding


async def test_the_path_is_kept_while_jobs_live_and_taken_down_after_the_last() -> None:
    running = "7|RUNNING|None|fluksio-request=r1\n"
    slurm, shell = _routed((0, "7\n", ""), (0, running, ""), (0, "7|COMPLETED|None|x\n", ""))
    await slurm.submit(slurm.profile("gpu-small"), request_id="r1", token="t")
    ((_argv, stdin),) = shell.sent
    assert "--connect-to login1-ib:45678" in (stdin or ""), "the job comes in through it"
    assert len(shell.relays) == 1 and shell.forwards == [40000]
    await slurm.poll(["7"])
    assert slurm.path_down() is None and not shell.relays[0].stopped.is_set()
    await slurm.poll(["7"])  # its last job ended
    assert shell.relays[0].stopped.is_set() and shell.forwards == [], "taken down"
    await slurm.close()


async def test_a_restarted_engine_builds_the_path_again_for_the_jobs_it_finds() -> None:
    slurm, shell = _routed((0, "7|RUNNING|None|fluksio-request=r1\n", ""))
    await slurm.poll(["7"])  # the first poll after a restart
    await async_wait_for(lambda: shell.relays, timeout=5, what="the path built again")
    await async_wait_for(lambda: slurm.path_down() is None, timeout=5, what="the path up")
    await slurm.close()
    assert shell.relays[0].stopped.is_set(), "and taken down when the engine stops"


async def test_while_a_login_needs_a_person_the_path_and_submissions_wait() -> None:
    slurm, shell = _routed(needs_login=True)
    with pytest.raises(ProvisionError) as raised:
        await slurm.submit(slurm.profile("gpu-small"), request_id="r1", token="t")
    assert raised.value.login_needed
    assert raised.value.detail.startswith("the way in through login1-ib waits for a login")
    assert shell.sent == [] and shell.relays == [], "nothing sent before a person logs in"
    await slurm.close()
