"""Each setting is declared once: ``fluksio serve``'s options are made from the engine's,
``fluksio-worker``'s from the worker's."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from fluksio.agent.calls import NOTICE_S, NOTICE_SIGNALS
from fluksio.agent.calls import fitted_notice as fitted_worker_notice
from fluksio.agent.cli import main as worker
from fluksio.agent.settings import WorkerSettings, worker_options
from fluksio.cli import cli
from fluksio.cli.local.options import settings_options
from fluksio.engine.runs.machine.book import CRASH_LIMIT
from fluksio.engine.settings import EngineSettings
from fluksio.provisioners.base import NoticeSignal, ProfileSettings, fitted_notice
from tests.support.cli import fluksio


def _flag(name: str) -> str:
    declared = {f.name: f for f in dataclasses.fields(EngineSettings)}[name]
    return "--" + (declared.metadata["flag"].name or name.replace("_", "-"))


def test_every_setting_has_a_flag_an_environment_variable_and_its_default_in_help() -> None:
    shown = CliRunner().invoke(cli, ["serve", "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    for field in dataclasses.fields(EngineSettings):
        flag = _flag(field.name)
        assert f" {flag} " in text, f"{field.name} has no flag"
        assert f"FLUKSIO_{field.name.upper()}" in text, f"{field.name} has no variable"
        if field.name != "data_dir" and field.default not in (None, (), False):
            after = text.split(f" {flag} ", 1)[1].split(" --", 1)[0]
            assert f"default: {field.default}" in after, f"{flag} hides its default"


def _read(
    options: Callable[[Callable[..., None]], Callable[..., None]],
    settings: Callable[..., Any],
    args: list[str],
    env: dict[str, str] | None,
) -> Any:
    """The settings value a command with ``options`` reads from ``args`` and ``env``."""
    found: list[Any] = []

    @click.command()
    @options
    def probe(**values: Any) -> None:
        found.append(settings(**values))

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return found[0]


def _parsed(args: list[str], env: dict[str, str] | None = None) -> EngineSettings:
    parsed: EngineSettings = _read(settings_options, EngineSettings, args, env)
    return parsed


def test_the_options_give_the_settings_their_declared_defaults(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert _parsed(["--data-dir", str(data)]) == EngineSettings(data_dir=data)


def test_a_flag_or_its_variable_sets_its_setting_and_a_bad_value_is_refused(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    given = _parsed(
        ["--data-dir", data, "--worker-gone-s", "45", "--trusted-proxy", "10.0.0.0/8"],
        env={"FLUKSIO_RUNNER_MODE": "spawn", "FLUKSIO_EVENT_BUFFER": "500"},
    )
    assert (given.worker_gone_s, given.trusted_proxies) == (45.0, ("10.0.0.0/8",))
    assert (given.runner_mode, given.event_buffer) == ("spawn", 500)
    assert given.frame_burst == 10 * given.worker_frames_per_s
    refused = CliRunner().invoke(cli, ["serve", "--data-dir", data, "--port", "70000"])
    assert refused.exit_code == 2
    assert "Invalid value for '--port'" in refused.output


def _numeric_settings() -> list[tuple[str, Any]]:
    return [
        (f.name, f.metadata["flag"])
        for f in dataclasses.fields(EngineSettings)
        if f.metadata["flag"].kind in (int, float)
    ]


NOT_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e400", "-1e400")
"""What ``float()`` reads and no setting may be: before, ``FLUKSIO_WORKER_GONE_S=nan`` turned
the 90-second rule off and ``FLUKSIO_ACCESS_TOKEN_TTL_S=1e400`` made every login a 500."""


def test_every_numeric_setting_refuses_what_is_not_a_finite_number_in_bounds(
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    checked = 0
    for name, flag in _numeric_settings():
        dashed, variable = _flag(name), f"FLUKSIO_{name.upper()}"
        assert flag.minimum is not None and flag.maximum is not None, f"{dashed} is unbounded"
        above = str(flag.maximum * 2 + 1 if flag.kind is float else int(flag.maximum) + 1)
        for bad in (*NOT_NUMBERS, above):
            by_flag = CliRunner().invoke(cli, ["serve", "--data-dir", data, dashed, bad])
            by_variable = CliRunner().invoke(
                cli, ["serve", "--data-dir", data], env={variable: bad}
            )
            for refused in (by_flag, by_variable):
                assert refused.exit_code == 2, (dashed, bad, refused.output)
                (said,) = [line for line in refused.output.splitlines() if "Error" in line]
                assert f"Invalid value for '{dashed}'" in said, said
            assert f"(env var: '{variable}')" in by_variable.output, by_variable.output
            checked += 1
    assert checked >= 7 * 20, "every numeric setting was tried"
    # The bounds are not too tight: each setting's own default and bounds are taken.
    for name, flag in _numeric_settings():
        for good in (flag.minimum, flag.maximum):
            value = str(int(good)) if flag.kind is int else repr(float(good))
            assert getattr(_parsed(["--data-dir", data, _flag(name), value]), name) == good


def test_the_workers_numbers_are_finite_and_bounded_too() -> None:
    url = ["--url", "ws://127.0.0.1:9/api/v1/workers/attach"]
    env = {"FLUKSIO_WORKER_TOKEN": "x"}
    cases = [(flag, bad) for flag in ("--max-idle", "--heartbeat") for bad in NOT_NUMBERS]
    cases += [("--cpus", str(10**30)), ("--gpus", "5000"), ("--ram-mb", "1e400")]
    for flag, bad in cases:
        refused = CliRunner().invoke(worker, [*url, flag, bad], env=env)
        assert refused.exit_code == 2, (flag, bad, refused.output)
        assert f"Invalid value for '{flag}'" in refused.output, refused.output
    for bad in ("nan", "inf", "1e400"):
        refused = CliRunner().invoke(worker, [*url, "--ends-at", bad], env=env)
        assert refused.exit_code == 2, refused.output
        assert f"--ends-at: {bad!r} is not a time" in refused.output, refused.output


def test_every_worker_option_is_declared_once_with_its_help_variable_and_default() -> None:
    shown = CliRunner().invoke(worker, ["--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    declared = dataclasses.fields(WorkerSettings)
    shown_flags = [
        f" --{f.name.replace('_', '-')} " for f in declared if not f.metadata["flag"].hidden
    ]
    for field in declared:
        flag: Any = field.metadata["flag"]
        dashed = "--" + field.name.replace("_", "-")
        if flag.hidden:
            assert f" {dashed} " not in text, f"{dashed} is for tests, not for --help"
            continue
        assert f" {dashed} " in text, f"{field.name} has no flag"
        # What --help says of it: up to the next option's line.
        after = text.split(f" {dashed} ", 1)[1]
        following = [*shown_flags[shown_flags.index(f" {dashed} ") + 1 :], " --help "]
        after = after.split(following[0], 1)[0]
        assert flag.help.split()[0] in after, f"{dashed} lost its help"
        if flag.envvar is not None:
            assert f"env var: {flag.envvar}" in after, f"{dashed} hides its variable"
        if field.default not in (None, "", False, (), dataclasses.MISSING):
            assert f"default: {field.default}" in after, f"{dashed} hides its default"


def _worker_parsed(args: list[str], env: dict[str, str] | None = None) -> WorkerSettings:
    parsed: WorkerSettings = _read(worker_options, WorkerSettings, args, env)
    return parsed


def test_the_workers_options_give_their_declared_defaults_and_variables() -> None:
    url = "ws://127.0.0.1:9/api/v1/workers/attach"
    assert _worker_parsed(["--url", url]) == WorkerSettings(url=(url,))
    given = _worker_parsed(
        ["--url", url, "--parallel", "3", "--no-report-cache", "--max-idle", "5"],
        env={"FLUKSIO_WORKER_TOKEN": "t", "FLUKSIO_WORKER_CONNECT_TO": "127.0.0.1:2"},
    )
    assert (given.parallel, given.report_cache, given.max_idle) == (3, False, 5.0)
    assert (given.token, given.connect_to) == ("t", "127.0.0.1:2")
    refused = CliRunner().invoke(worker, ["--url", url, "--max-idle", "0"], env={"X": ""})
    assert refused.exit_code == 2 and "Invalid value for '--max-idle'" in refused.output
    missing = CliRunner().invoke(worker, [])
    assert missing.exit_code == 2 and "Missing option '--url'" in missing.output


@pytest.mark.process
def test_the_engine_does_not_start_on_a_setting_that_is_not_a_number(tmp_path: Path) -> None:
    # The values that started an engine before, each refused by a real `fluksio serve`.
    data_dir = tmp_path / "data"
    for variable, bad in (
        ("FLUKSIO_WORKER_GONE_S", "nan"),
        ("FLUKSIO_WORKER_GONE_S", "inf"),
        ("FLUKSIO_ACCESS_TOKEN_TTL_S", "1e400"),
    ):
        refused = fluksio(
            "serve", "--port", "0", "--data-dir", str(data_dir), env={variable: bad}, timeout=30
        )
        assert refused.returncode == 2, refused.stderr
        said = refused.stderr.strip().splitlines()[-1]
        assert said.startswith("Error: Invalid value for '--") and f"'{variable}'" in said
        assert said.endswith(f"{bad!r} is not a finite number."), said
        assert not (data_dir / "engine.json").exists()


def test_a_default_two_rooms_state_is_the_same_in_both() -> None:
    """Defaults stated where the architecture keeps two rooms apart. A profile passes the
    worker ``--notice-s``/``--notice-signal`` only when it differs from the worker's own
    default, and the run machine's crash limit stands in for the engine's setting where no
    settings are given (tests, embedding)."""
    assert ProfileSettings.model_fields["notice_s"].default is None is _default("notice_s")
    # Not set, both fit a job alike: the profile for its walltime, the worker for its own.
    for job_s in (None, 60.0, 120.0, 480.0, 3600.0):
        assert fitted_notice(job_s) == fitted_worker_notice(job_s)
    assert fitted_notice(None) == NOTICE_S and fitted_notice(120.0) == 30.0
    assert set(typing.get_args(NoticeSignal)) == set(NOTICE_SIGNALS)
    assert ProfileSettings.model_fields["notice_signal"].default == _default("notice_signal")
    engine_default = {f.name: f.default for f in dataclasses.fields(EngineSettings)}
    assert engine_default["crash_limit"] == CRASH_LIMIT


def _default(name: str) -> Any:
    return {f.name: f.default for f in dataclasses.fields(WorkerSettings)}[name]
