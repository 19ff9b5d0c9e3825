"""Each engine setting is declared once: ``fluksio serve``'s options are made from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from fluksio.cli import cli
from fluksio.cli.options import settings_options
from fluksio.engine.settings import EngineSettings


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


def _parsed(args: list[str], env: dict[str, str] | None = None) -> EngineSettings:
    found: list[EngineSettings] = []

    @click.command()
    @settings_options
    def probe(**values: Any) -> None:
        found.append(EngineSettings(**values))

    result = CliRunner().invoke(probe, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return found[0]


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
