"""The Grid Engine plugin against scripted replies of its submit host: what it sends, how
it reads Grid Engine's answers, what a bad ``provisioners.json`` entry is told.
``tests/test_gridengine.py`` runs it against a real cell.

The plugin is installed like a third party's, and found by its entry point.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fluksio_gridengine import GridEngineProvisioner, GridEngineSettings
from fluksio_gridengine.script import error_reasons, parse_qstat, parse_qsub
from fluksio_gridengine.settings import parse_ge_time
from fluksio_gridengine.states import ge_state

from fluksio.errors import ConfigError
from fluksio.provisioners import JobState, JobStatus, ProvisionError
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.plugins import build_plugins
from fluksio.provisioners.testing import ScriptedShell

DOCS = Path(__file__).resolve().parent.parent / "docs" / "provisioners.md"


def _documented_entry() -> dict[str, Any]:
    """The entry docs/provisioners.md shows for Grid Engine."""
    text = DOCS.read_text()
    section = text[text.index("## Grid Engine") :]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block is not None
    entry: dict[str, Any] = json.loads(block.group(1))
    return entry


def _provisioner(
    *replies: tuple[int, str, str], **changes: Any
) -> tuple[GridEngineProvisioner, ScriptedShell]:
    shell = ScriptedShell(*replies)
    settings = GridEngineSettings.model_validate({**_documented_entry(), **changes})
    return GridEngineProvisioner(settings, shell), shell


RUNNING_AND_PENDING = """<?xml version='1.0'?>
<job_info  xmlns:xsd="http://arc.liv.ac.uk/repos/darcs/sge/source/dist/util/resources/schemas/qstat/qstat.xsd">
  <queue_info>
    <job_list state="running">
      <JB_job_number>7</JB_job_number>
      <JAT_prio>0.55500</JAT_prio>
      <JB_name>fluksio-sge-gpu.req7</JB_name>
      <JB_owner>me</JB_owner>
      <state>r</state>
      <JAT_start_time>2026-12-03T06:24:06</JAT_start_time>
      <queue_name>all.q@node1</queue_name>
      <slots>8</slots>
    </job_list>
  </queue_info>
  <job_info>
    <job_list state="pending">
      <JB_job_number>8</JB_job_number>
      <JAT_prio>0.00000</JAT_prio>
      <JB_name>fluksio-sge-gpu.req8</JB_name>
      <JB_owner>me</JB_owner>
      <state>hqw</state>
      <JB_submission_time>2026-12-03T06:23:59</JB_submission_time>
      <queue_name></queue_name>
      <slots>8</slots>
    </job_list>
    <job_list state="pending">
      <JB_job_number>9</JB_job_number>
      <JAT_prio>0.00000</JAT_prio>
      <JB_name>my-own-job</JB_name>
      <JB_owner>me</JB_owner>
      <state>Eqw</state>
      <queue_name></queue_name>
      <slots>1</slots>
    </job_list>
  </job_info>
</job_info>
"""


def test_the_plugin_is_discovered_by_its_entry_point() -> None:
    # That it imports only the public API: tests/test_architecture.py, for every plugin.
    plugins = build_plugins()
    assert plugins.failures == []
    assert plugins.provisioner_types()["gridengine"] is GridEngineProvisioner


def test_the_documented_entry_is_valid_and_renders_its_job_script() -> None:
    hosts, _shell = _provisioner()
    profile = hosts.profile("gpu")
    assert hosts.walltime_s(profile) == 4 * 3600, "read from the profile's -l h_rt"
    script = hosts.render(profile, request_id="r1")
    assert script == (
        "#!/bin/bash\n"
        "#$ -N fluksio-sge-gpu.r1\n"
        "#$ -S /bin/bash\n"
        "#$ -j y\n"
        "#$ -o $HOME/.fluksio/jobs/\n"
        "#$ -pe smp 8\n"
        "#$ -l h_vmem=8192M\n"
        "#$ -l gpu=1\n"
        "#$ -q gpu.q\n"
        "#$ -P imaging\n"
        "#$ -l h_rt=4:00:00\n"
        "set -e\n"
        "module load cuda/12\n"
        "source ~/venvs/fluksio/bin/activate\n"
        "# The worker token: read from a file written at submission, then deleted.\n"
        'FLUKSIO_WORKER_TOKEN=$(cat -- "$HOME"/.fluksio/tokens/r1)\n'
        'rm -f -- "$HOME"/.fluksio/tokens/r1\n'
        "export FLUKSIO_WORKER_TOKEN\n"
        "export FLUKSIO_WORKER_ENDS_AT=$(( $(date +%s) + 14400 ))\n"
        "exec fluksio-worker --url wss://fluksio.example.com/api/v1/workers/attach"
        " --name sge-gpu --labels gpu --max-idle 300 --parallel 8 --cpus 8 --gpus 1"
        " --ram-mb 65536\n"
    )


def test_a_walltime_becomes_h_rt_and_a_profile_without_cpus_asks_for_no_slots() -> None:
    hosts, _shell = _provisioner(
        profiles=[{"name": "cpu", "ram_mb": 1000, "walltime_s": 5430.5, "labels": ["cpu"]}]
    )
    script = hosts.render(hosts.profile("cpu"), request_id="r2")
    assert "#$ -l h_rt=1:30:31\n" in script and "-pe" not in script
    assert "#$ -l h_vmem=1000M\n" in script, "one slot: the whole of ram_mb"
    assert "+ 5430 ))" in script


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"gpu_resource": None},
            "profile 'gpu' asks for gpus, and Grid Engine has no standard GPU resource",
        ),
        ({"qsub": ["P imaging"]}, "'P imaging' is not a qsub option (it starts with -)"),
        ({"qsub": ["-l h_rt=soon"]}, "'soon' is not a Grid Engine time"),
        ({"queue": "gpu.q; rm -rf ~"}, "is not a Grid Engine queue name"),
        ({"prerun": ["echo\nrm"]}, "prerun lines must not contain control characters"),
    ],
)
def test_a_bad_entry_is_refused_naming_what_is_wrong(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    entry = _documented_entry()
    if "gpu_resource" in change:
        entry.update(change)
    else:
        entry["profiles"] = [{**entry["profiles"][0], **change}]
    path = tmp_path / "provisioners.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(ConfigError) as raised:
        load_provisioners(path, build_plugins().provisioner_types())
    assert raised.value.detail.startswith(f"{path}: provisioner 'sge'"), raised.value.detail
    assert message in raised.value.detail, raised.value.detail


def test_grid_engine_times_and_job_ids_are_read_in_each_of_their_forms() -> None:
    assert parse_ge_time("4:00:00") == 14400
    assert parse_ge_time("90") == 90 and parse_ge_time("1:30") == 90
    assert parse_ge_time("::30") == 30
    assert parse_ge_time("INFINITY") is None
    assert parse_qsub("1234\n") == "1234"
    assert parse_qsub("77.1-4:1") == "77"
    with pytest.raises(ValueError, match="not a job id"):
        parse_qsub("Your job 12 has been submitted")


@pytest.mark.parametrize(
    ("letters", "state", "words"),
    [
        ("qw", JobState.PENDING, None),
        ("hqw", JobState.PENDING, "held"),
        ("r", JobState.RUNNING, None),
        ("Rr", JobState.RUNNING, None),
        ("t", JobState.RUNNING, "starting on its host"),
        ("s", JobState.RUNNING, "suspended"),
        ("S", JobState.RUNNING, "suspended with its queue"),
        ("dr", JobState.CANCELLED, "being deleted"),
        ("Eqw", JobState.FAILED, "in error"),
        ("Rq", JobState.PENDING, None),
        ("x", JobState.UNKNOWN, "state 'x'"),
    ],
)
def test_each_state_grid_engine_shows_is_one_of_ours(
    letters: str, state: JobState, words: str | None
) -> None:
    assert ge_state(letters) == (state, words)


def test_qstat_lists_each_job_with_its_state_and_the_request_it_was_for() -> None:
    jobs = parse_qstat(RUNNING_AND_PENDING)
    assert jobs["7"].status == JobStatus(JobState.RUNNING, "r", "on all.q@node1")
    assert jobs["7"].request_id == "req7"
    assert jobs["8"].status == JobStatus(JobState.PENDING, "hqw", "held")
    assert jobs["9"].request_id is None, "a user's own job is never taken for ours"
    assert parse_qstat("") == {}


async def test_a_submission_sends_the_token_on_stdin_and_reads_the_job_id() -> None:
    hosts, shell = _provisioner((0, "4242\n", ""))
    submitted = await hosts.submit(hosts.profile("gpu"), request_id="r1", token="SECRET")
    assert (submitted.job_id, submitted.profile) == ("4242", "gpu")
    ((argv, stdin),) = shell.sent
    assert argv[3:] == ("fluksio-submit", ".fluksio/tokens/r1", "")
    assert "SECRET" not in " ".join(argv) and shell.once == [True]
    assert stdin is not None and stdin.startswith("SECRET\n#!/bin/bash\n")
    assert "qsub -terse" in argv[2]


async def test_a_refused_submission_says_why_in_grid_engines_words() -> None:
    said = (
        'Unable to run job: Job was rejected because job requests unknown queue "gpu.q".\n'
        "Exiting.\n"
    )
    hosts, _shell = _provisioner((1, "", said))
    with pytest.raises(ProvisionError) as raised:
        await hosts.submit(hosts.profile("gpu"), request_id="r1", token="t")
    assert raised.value.detail == (
        'qsub refused the job: Job was rejected because job requests unknown queue "gpu.q".'
    )


async def test_a_poll_reads_the_queue_once_and_asks_why_a_job_is_in_error() -> None:
    reason = (
        "error reason          1:      12/03/2026 06:27:08 [1001:22719]: error: can't open"
        ' output file "/nonexistent/x/": No such file or directory\n'
    )
    broken = RUNNING_AND_PENDING.replace("my-own-job", "fluksio-sge-gpu.req9")
    hosts, shell = _provisioner((0, broken, ""), (0, reason, ""))
    statuses = await hosts.poll(["7", "9", "10"])
    assert statuses["7"].state is JobState.RUNNING
    assert statuses["9"] == JobStatus(
        JobState.FAILED,
        "Eqw",
        'error: can\'t open output file "/nonexistent/x/": No such file or directory',
    )
    assert "10" not in statuses, "an ended job is no longer listed"
    assert [sent[0][-1] for sent in shell.sent] == ['qstat -xml -u "$(id -un)"', "9"]
    assert error_reasons("job_number: 9\n") is None


async def test_a_lost_submission_is_found_by_its_request() -> None:
    hosts, _shell = _provisioner((0, RUNNING_AND_PENDING, ""))
    assert await hosts.find(["req8", "nobody"]) == {"req8": "8"}


async def test_commands_run_after_the_sites_settings_file() -> None:
    hosts, shell = _provisioner((0, "", ""), settings_file="/opt/sge/default/common/settings.sh")
    await hosts.cancel("12", request_id="r1")
    ((argv, _stdin),) = shell.sent
    assert argv[2].startswith(". /opt/sge/default/common/settings.sh || exit\n")
    assert argv[3:] == ("fluksio-cancel", "12", ".fluksio/tokens/r1")


async def test_check_names_a_parallel_environment_the_cell_does_not_have() -> None:
    # The documented profile asks for 8 cpus (slots of "smp"); this cell has no PE at all.
    hosts, shell = _provisioner((0, "all.q\ngpu.q\n#pe\n", ""))
    with pytest.raises(ProvisionError) as raised:
        await hosts.check()
    assert raised.value.detail == (
        "parallel_environment 'smp' is not one of the cell's (qconf -spl lists: none)"
    )
    assert "qconf -spl 2>/dev/null || true" in shell.sent[0][0][2], "no PE is not a failure"


def test_the_login_route_is_grid_engines_too_with_slurms_validation_and_words() -> None:
    routed, _shell = _provisioner(route="login", login_address="submit-ib")
    script = routed.render(routed.profile("gpu"), request_id="r1")
    assert script.endswith(" --connect-to submit-ib:PORT\n"), script.splitlines()[-1]
    assert routed.reach() == (
        "through the login node, at submit-ib, verifying"
        " wss://fluksio.example.com/api/v1/workers/attach"
    )
    assert routed.path_down() is None, "nothing is down before the route is wanted"
    with pytest.raises(ValueError, match='login_address is used only with "route": "login"'):
        _provisioner(login_address="submit-ib")


async def test_a_shell_that_cannot_forward_cannot_carry_grid_engines_login_route() -> None:
    routed, shell = _provisioner(route="login")
    with pytest.raises(ProvisionError, match="needs an SSH transport that forwards"):
        await routed.submit(routed.profile("gpu"), request_id="r1", token="t")
    assert shell.sent == [], "nothing submitted without a way in"
