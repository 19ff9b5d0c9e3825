"""Provisioner plugins, provisioners.json, and the Slurm job script (no Slurm needed here).

What is here is tested as text and as configuration, the way a user meets it first:
``fluksio provisioners check``. The life cycle against a real Slurm is in
tests/test_slurm.py.
"""

from __future__ import annotations

import inspect
import json
import typing
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fluksio.errors import ConfigError
from fluksio.provisioners import hookspecs
from fluksio.provisioners.base import JobState, ProfileSettings, ProvisionerSettings
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.hosts import HostsProvisioner
from fluksio.provisioners.plugins import ENTRY_POINT_GROUP, build_plugins
from fluksio.provisioners.provisioner import Provisioner
from fluksio.provisioners.slurm import (
    SlurmProfile,
    SlurmProvisioner,
    SlurmSettings,
    missing_partitions,
    parse_sbatch_parsable,
    parse_slurm_time,
    past_time_limits,
    render_script,
    slurm_state,
)
from tests.support.cli import fluksio
from tests.support.engine import write_provisioners

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "provisioners.example.json"


def _types() -> dict[str, Any]:
    return build_plugins().provisioner_types()


def _write(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "provisioners.json"
    path.write_text(json.dumps(entries))
    return path


def _example() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(EXAMPLE.read_text())
    return loaded


def test_the_installed_slurm_plugin_is_discovered_by_entry_point() -> None:
    plugins = build_plugins()
    assert plugins.failures == []
    # The plugins under plugins/ (local, gridengine) are installed in the test environment too.
    assert plugins.provisioner_types()["slurm"] is SlurmProvisioner
    assert sorted(plugins.provisioner_types()) == ["gridengine", "local", "slurm", "ssh"]
    assert "slurm" in {
        point.name
        for point in __import__("importlib.metadata").metadata.entry_points(group=ENTRY_POINT_GROUP)
    }


HOOKS = ("fluksio_provisioner_types", "fluksio_worker_attached", "fluksio_worker_gone")
METHODS = ("render", "submit", "poll", "cancel", "check", "close")


def test_only_the_extension_points_are_hooks_each_documented_like_pytests() -> None:
    specs = {name: value for name, value in vars(hookspecs).items() if name.startswith("fluksio_")}
    assert tuple(specs) == HOOKS, "the life cycle is methods, not hooks"
    for name, spec in specs.items():
        doc = inspect.getdoc(spec) or ""
        for parameter in inspect.signature(spec).parameters:
            assert f":param {parameter}:" in doc, f"{name} does not document {parameter}"
        assert ":return:" in doc, name
        assert spec.__annotations__.get("return"), name
    types = build_plugins().manager.hook.fluksio_provisioner_types.get_hookimpls()
    assert {impl.plugin_name for impl in types} >= {"slurm", "local"}


def test_the_guide_names_every_hook_and_every_method_a_plugin_writes() -> None:
    guide = (ROOT / "docs" / "writing-a-provisioner.md").read_text()
    for name in (*HOOKS, *METHODS):
        assert f"`{name}`" in guide, f"docs/writing-a-provisioner.md does not mention {name}"
    abstract = {
        name
        for name, value in vars(Provisioner).items()
        if getattr(value, "__isabstractmethod__", 0)
    }
    assert abstract == {"render", "submit", "poll", "cancel"}
    assert set(METHODS) <= set(vars(Provisioner)), "every listed method is on the base class"


def test_a_broken_plugin_is_reported_by_name_and_left_out() -> None:
    points = [
        EntryPoint("missing", "no_such_module_for_fluksio", ENTRY_POINT_GROUP),
        EntryPoint("misspelt", "tests.support.bad_plugins:misspelt", ENTRY_POINT_GROUP),
        EntryPoint(
            "wrong-signature", "tests.support.bad_plugins:wrong_signature", ENTRY_POINT_GROUP
        ),
        EntryPoint("slurm", "fluksio.provisioners.slurm", ENTRY_POINT_GROUP),
    ]
    plugins = build_plugins(points)
    failures = {failure.name: failure.error for failure in plugins.failures}
    assert set(failures) == {"missing", "misspelt", "wrong-signature"}
    assert "ModuleNotFoundError" in failures["missing"]
    assert "fluksio_provisoner_types" in failures["misspelt"]
    assert "extra" in failures["wrong-signature"]
    assert plugins.provisioner_types() == {"slurm": SlurmProvisioner}, "the good one still works"


def test_the_specs_example_file_is_valid_as_written() -> None:
    [(kind, settings), (hosts_kind, hosts), (ge_kind, ge)] = load_provisioners(EXAMPLE, _types())
    assert kind is SlurmProvisioner and settings.name == "hpc"
    assert [p.name for p in settings.profiles] == ["gpu-small"]
    assert hosts_kind is HostsProvisioner and hosts.name == "boxes"
    assert [p.name for p in hosts.profiles] == ["gpu-box-1"]
    assert ge_kind.type_name == "gridengine" and ge.name == "sge"
    assert [(p.name, ge_kind.walltime_s(ge_kind(ge), p)) for p in ge.profiles] == [
        ("cpu-8", 4 * 3600)
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda e: e.update(type="kubernetes"),
            "provisioner 'hpc', field type: 'kubernetes' is not an installed provisioner type"
            " (installed: gridengine, local, slurm, ssh)",
        ),
        (
            lambda e: e["profiles"][0].update(gpus=-1),
            "provisioner 'hpc', profile 'gpu-small', field gpus: Input should be greater than or"
            " equal to 0",
        ),
        (lambda e: e.pop("login"), "provisioner 'hpc', field login: Field required"),
        (
            lambda e: e["profiles"][0].update(sbatch=["--partition=gpu\nrm -rf /"]),
            "profile 'gpu-small', field sbatch: Value error, sbatch options must not contain"
            " control characters",
        ),
        (
            lambda e: e["profiles"][0].update(surprise=1),
            "profile 'gpu-small', field surprise: Extra inputs are not permitted",
        ),
        (lambda e: e.update(max_idle_s=-5), "field max_idle_s"),
        (
            lambda e: e["profiles"][0].update(cpus="8"),
            "profile 'gpu-small', field cpus: Input should be a valid integer",
        ),
        (
            lambda e: e.update(trust_on_first_use="yes"),
            "field trust_on_first_use: Input should be a valid boolean",
        ),
        (
            lambda e: e["profiles"][0].update(max_workers=0),
            "profile 'gpu-small', field max_workers: Input should be greater than or equal to 1",
        ),
        (
            lambda e: e["profiles"][0].update(parallel="4"),
            "profile 'gpu-small', field parallel: Input should be a valid integer",
        ),
    ],
    ids=[
        "unknown-type",
        "negative-gpus",
        "missing-login",
        "newline-in-sbatch",
        "extra-field",
        "negative-idle",
        "string-for-cpus",
        "string-for-a-bool",
        "no-workers",
        "string-for-parallel",
    ],
)
def test_errors_name_the_file_provisioner_profile_and_field(
    tmp_path: Path, change: Any, message: str
) -> None:
    entries = _example()
    change(entries[0])
    path = _write(tmp_path, entries)
    with pytest.raises(ConfigError) as raised:
        load_provisioners(path, _types())
    assert raised.value.detail.startswith(str(path))
    assert message in raised.value.detail


def _numeric_fields(model: type[BaseModel]) -> list[str]:
    return [
        name
        for name, field in model.model_fields.items()
        if {int, float} & set(typing.get_args(field.annotation) or (field.annotation,))
    ]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "1e12"])
@pytest.mark.parametrize("entry_at", [0, 2], ids=["slurm", "gridengine-plugin"])
def test_every_number_of_the_file_is_finite_and_bounded(
    tmp_path: Path, literal: str, entry_at: int
) -> None:
    # Python's json reads NaN, Infinity and 1e400 (as infinity); each is refused by name.
    tried = 0
    for level, fields in (
        ("provisioner", _numeric_fields(ProvisionerSettings)),
        ("profile", _numeric_fields(ProfileSettings)),
    ):
        for field in fields:
            entries = _example()
            entry = entries[entry_at]
            target = entry if level == "provisioner" else entry["profiles"][0]
            target[field] = "@number@"
            path = tmp_path / "provisioners.json"
            path.write_text(json.dumps(entries).replace('"@number@"', literal))
            with pytest.raises(ConfigError) as raised:
                load_provisioners(path, _types())
            said = raised.value.detail
            assert f"provisioner {entry['name']!r}" in said and f"field {field}:" in said, said
            if level == "profile":
                assert f"{target['name']!r}" in said, said
            tried += 1
    assert tried >= 12


@pytest.mark.process
def test_check_prints_profiles_and_the_exact_script(tmp_path: Path) -> None:
    path = _write(tmp_path, _example())
    listed = fluksio("provisioners", "check", "--file", str(path))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == (
        "hpc (slurm):\n"
        "  workers reach the engine directly, at wss://fluksio.example.com/api/v1/workers/attach\n"
        "  gpu-small: cpus=8 gpus=1 ram_mb=65536 labels=gpu max_workers=4 parallel=2"
        " walltime=14400s\n"
        "boxes (ssh):\n"
        "  workers reach the engine directly, at wss://fluksio.example.com/api/v1/workers/attach\n"
        "  gpu-box-1: cpus=16 gpus=2 ram_mb=65536 labels=gpu max_workers=1 parallel=16"
        " walltime=none\n"
        "sge (gridengine):\n"
        "  workers reach the engine directly, at wss://fluksio.example.com/api/v1/workers/attach\n"
        "  cpu-8: cpus=8 gpus=as detected ram_mb=16384 labels=cpu max_workers=1 parallel=8"
        " walltime=14400s\n"
        "as detected: not set in the profile, so the worker reports what it finds on its"
        " machine (its cores, its GPU devices, its memory)\n"
    )
    (tmp_path / "routed").mkdir()
    routed = _write(
        tmp_path / "routed", [{**_example()[0], "route": "login", "login_address": "login1-ib"}]
    )
    listed = fluksio("provisioners", "check", "--file", str(routed))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1] == (
        "  workers reach the engine through the login node, at login1-ib, verifying"
        " wss://fluksio.example.com/api/v1/workers/attach"
    )
    script = fluksio("provisioners", "check", "--file", str(path), "--script", "hpc/gpu-small")
    assert script.returncode == 0 and script.stdout.startswith("#!/bin/bash\n")
    bad = fluksio("provisioners", "check", "--file", str(path), "--script", "hpc/none")
    assert bad.returncode == 2 and "no profile 'none'" in bad.stderr
    broken = _write(tmp_path, [{"type": "slurm"}])
    refused = fluksio("provisioners", "check", "--file", str(broken))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "field name: Field required" in refused.stderr


def _settings(**changes: Any) -> tuple[SlurmSettings, SlurmProfile]:
    entry = _example()[0]
    profile_changes = changes.pop("profile", {})
    entry.update(changes)
    entry["profiles"][0].update(profile_changes)
    settings = SlurmSettings.model_validate(entry)
    return settings, settings.profiles[0]


def test_the_job_script_is_exactly_this() -> None:
    settings, profile = _settings()
    assert render_script(settings, profile, request_id="abc") == (
        "#!/bin/bash\n"
        "#SBATCH --job-name=fluksio-hpc-gpu-small\n"
        "#SBATCH --comment=fluksio-request=abc\n"
        "#SBATCH --nodes=1\n"
        "#SBATCH --cpus-per-task=8\n"
        "#SBATCH --mem=65536M\n"
        "#SBATCH --partition=gpu\n"
        "#SBATCH --gres=gpu:1\n"
        "#SBATCH --time=04:00:00\n"
        "set -e\n"
        "module load cuda/12\n"
        "source ~/venvs/fluksio/bin/activate\n"
        "# The worker token: read from a file written at submission, then deleted.\n"
        'FLUKSIO_WORKER_TOKEN=$(cat -- "$HOME"/.fluksio/tokens/abc)\n'
        'rm -f -- "$HOME"/.fluksio/tokens/abc\n'
        "export FLUKSIO_WORKER_TOKEN\n"
        "exec fluksio-worker --url wss://fluksio.example.com/api/v1/workers/attach"
        " --name hpc-gpu-small --labels gpu --max-idle 300 --parallel 2 --cpus 8 --gpus 1"
        " --ram-mb 65536\n"
    )


def test_gpus_come_from_the_profile_unless_sbatch_asks_and_zero_idle_means_none() -> None:
    settings, profile = _settings(max_idle_s=0, profile={"sbatch": ["--partition=gpu"]})
    script = render_script(settings, profile, request_id="t")
    assert "#SBATCH --gpus=1\n" in script and "--max-idle" not in script


def test_hostile_values_stay_data() -> None:
    settings, profile = _settings(engine_url="wss://x/api/v1/workers/attach;$(touch /tmp/pwned)")
    script = render_script(settings, profile, request_id="with spaces/t'x")
    assert "'wss://x/api/v1/workers/attach;$(touch /tmp/pwned)'" in script
    assert "$(cat -- \"$HOME\"/'.fluksio/tokens/with spaces/t'\"'\"'x')" in script
    assert "#SBATCH --comment='fluksio-request=with spaces/t'\"'\"'x'\n" in script
    with pytest.raises(ValueError, match="control characters"):
        _settings(engine_url="wss://x\nrm -rf ~")
    with pytest.raises(ValueError, match="control characters"):
        _settings(profile={"prerun": ["ok", "bad\rline"]})
    with pytest.raises(ValueError, match="not an sbatch option"):
        _settings(profile={"sbatch": ["partition=gpu"]})
    with pytest.raises(ValueError):
        _settings(profile={"labels": ["gpu; rm -rf /"]})


@pytest.mark.parametrize(
    ("stdout", "job_id"),
    [("1234\n", "1234"), ("1234;localcluster\n", "1234"), ("  77  ", "77")],
)
def test_sbatch_parsable_job_ids(stdout: str, job_id: str) -> None:
    assert parse_sbatch_parsable(stdout) == job_id


@pytest.mark.parametrize("stdout", ["", "Submitted batch job 1234", "sbatch: error: x", "12 34"])
def test_sbatch_output_that_is_not_a_job_id_is_an_error(stdout: str) -> None:
    with pytest.raises(ValueError, match="not a job id"):
        parse_sbatch_parsable(stdout)


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("PENDING", JobState.PENDING),
        ("RUNNING", JobState.RUNNING),
        ("COMPLETING", JobState.RUNNING),
        ("COMPLETED", JobState.COMPLETED),
        ("CANCELLED by 0", JobState.CANCELLED),
        ("CANCELLED+", JobState.CANCELLED),
        ("TIMEOUT", JobState.TIMEOUT),
        ("OUT_OF_MEMORY", JobState.FAILED),
        ("NODE_FAIL", JobState.FAILED),
        # Paused, not ended: a stopped job keeps its CPUs, a suspended one lent them out.
        ("STOPPED", JobState.RUNNING),
        ("SUSPENDED", JobState.PENDING),
        # Ended by the system for another job: not a failure of what it ran.
        ("PREEMPTED", JobState.CANCELLED),
        ("DEADLINE", JobState.TIMEOUT),
        ("SOMETHING_NEW", JobState.UNKNOWN),
    ],
)
def test_slurm_states_map_onto_ours(text: str, state: JobState) -> None:
    assert slurm_state(text) is state


@pytest.mark.process
def test_serve_refuses_a_bad_provisioners_json_in_one_sentence(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    entry = {**_example()[0], "profiles": [{"name": "gpu-small", "cpus": 0}]}
    write_provisioners(data_dir, [entry])
    refused = fluksio("serve", "--port", "0", "--data-dir", str(data_dir), timeout=30)
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"Error: {data_dir / 'provisioners.json'}: provisioner 'hpc', profile 'gpu-small',"
        " field cpus: Input should be greater than or equal to 1"
    ]
    assert not (data_dir / "engine.json").exists()


@pytest.mark.parametrize(
    ("limit", "seconds"),
    [
        ("90", 5400),
        ("1:30", 90),
        ("04:00:00", 14400),
        ("2-0", 172800),
        ("1-12", 129600),
        ("1-1:30", 91800),
        ("1-0:0:30", 86430),
        ("UNLIMITED", None),
        ("0", None),
    ],
)
def test_every_slurm_time_format_is_read(limit: str, seconds: int | None) -> None:
    assert parse_slurm_time(limit) == seconds


def test_a_profiles_walltime_comes_from_sbatch_or_is_set_and_then_submitted() -> None:
    settings, profile = _settings()
    assert profile.time_limit_s == 4 * 3600  # --time=04:00:00 in the example
    settings, short = _settings(profile={"sbatch": ["--partition=gpu", "-t 30"]})
    assert short.time_limit_s == 1800
    settings, explicit = _settings(profile={"sbatch": ["--partition=gpu"], "walltime_s": 5400})
    assert explicit.time_limit_s == 5400
    assert "#SBATCH --time=90\n" in render_script(settings, explicit, request_id="r")
    with pytest.raises(ValueError, match="'soon' is not a Slurm time limit"):
        _settings(profile={"sbatch": ["--time=soon"]})


def test_the_partitions_a_profile_asks_for_are_read_and_missing_ones_named() -> None:
    _, one = _settings(profile={"sbatch": ["-p debug", "--partition=gpu,cpu"]})
    _, plain = _settings(profile={"sbatch": ["--time=10"]})
    assert missing_partitions([plain], ["debug*"]) == [], "no partition: the default"
    assert missing_partitions([one], ["debug*", "gpu", "cpu"]) == [], "the last one wins"
    assert missing_partitions([one], ["debug*", "gpu"]) == [
        f"profile {one.name!r} asks for partition 'cpu', which the cluster does not have"
        " (sinfo lists: debug, gpu)"
    ]


def test_a_profile_asking_past_its_partitions_time_limit_is_named() -> None:
    _, long = _settings(profile={"sbatch": ["-p short", "--time=00:05:00"]})
    _, either = _settings(profile={"sbatch": ["-p short,long", "--time=00:05:00"]})
    _, plain = _settings(profile={"sbatch": ["--time=2-00:00:00"]})
    limits = {"debug": None, "short": 120.0, "long": 3600.0}
    assert past_time_limits([long], limits, "debug") == [
        f"profile {long.name!r} asks for jobs of 00:05:00, longer than partition 'short'"
        " (00:02:00) allows; ask for less, or name another partition"
    ]
    assert past_time_limits([either], limits, "debug") == [], "one of them takes it"
    assert past_time_limits([plain], limits, "debug") == [], "the default has no limit"
    assert past_time_limits([plain], {"debug": 86400.0}, "debug") == [
        f"profile {plain.name!r} asks for jobs of 2-00:00:00, longer than partition 'debug'"
        " (1-00:00:00) allows; ask for less, or name another partition"
    ]
