"""The `fluksio` command line against a real engine; every user error is one sentence, exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import fluksio
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD, EngineProcess
from tests.support.http import call


def _assert_one_sentence_exit_2(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0]


def test_tokens_mint_list_revoke_through_the_api(engine: EngineProcess) -> None:
    env = {
        "FLUKSIO_URL": engine.api,
        "FLUKSIO_USERNAME": SUPERUSER,
        "FLUKSIO_PASSWORD": SUPERUSER_PASSWORD,
    }
    minted = fluksio("tokens", "mint", "gpu-dev", "--labels", "gpu,cuda12", env=env)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    assert call("GET", f"{engine.api}/workers/tokens/self", token=token).body["labels"] == [
        "gpu",
        "cuda12",
    ]

    listed = fluksio("tokens", "list", "--json", env=env)
    rows = json.loads(listed.stdout)
    assert [(r["name"], r["status"]) for r in rows] == [("gpu-dev", "active")]
    assert token not in listed.stdout

    revoked = fluksio("tokens", "revoke", rows[0]["jti"], env=env)
    assert revoked.returncode == 0 and "Revoked 'gpu-dev'" in revoked.stdout
    assert call("GET", f"{engine.api}/workers/tokens/self", token=token).status == 401


def test_tokens_finds_the_engine_through_the_data_dir_and_takes_a_bearer_token(
    engine: EngineProcess,
) -> None:
    env = {"FLUKSIO_DATA_DIR": str(engine.data_dir), "FLUKSIO_TOKEN": engine.login()}
    done = fluksio("tokens", "list", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("JTI")


def test_errors_are_one_sentence_and_exit_2(engine: EngineProcess, tmp_path: Path) -> None:
    creds = {"FLUKSIO_USERNAME": SUPERUSER, "FLUKSIO_PASSWORD": SUPERUSER_PASSWORD}
    _assert_one_sentence_exit_2(
        fluksio("tokens", "list", env={"FLUKSIO_URL": engine.api}),
        "FLUKSIO_TOKEN",
    )
    _assert_one_sentence_exit_2(
        fluksio("tokens", "list", env={"FLUKSIO_URL": "http://127.0.0.1:9/api/v1", **creds}),
        "cannot reach the engine",
    )
    _assert_one_sentence_exit_2(
        fluksio("tokens", "mint", "bad name", env={"FLUKSIO_URL": engine.api, **creds}),
        "name:",
    )
    _assert_one_sentence_exit_2(
        fluksio("tokens", "revoke", "f" * 32, env={"FLUKSIO_URL": engine.api, **creds}),
        "no worker token",
    )
    wrong = {"FLUKSIO_USERNAME": SUPERUSER, "FLUKSIO_PASSWORD": "nope-nope"}
    _assert_one_sentence_exit_2(
        fluksio("tokens", "list", env={"FLUKSIO_URL": engine.api, **wrong}),
        "incorrect username or password",
    )
    _assert_one_sentence_exit_2(
        fluksio("keys", "rotate", "--yes", "--data-dir", str(tmp_path / "empty")),
        "holds no Fluksio state",
    )
    _assert_one_sentence_exit_2(
        fluksio("keys", "rotate", "--data-dir", str(engine.data_dir)), "--yes"
    )
    _assert_one_sentence_exit_2(
        fluksio(
            "users",
            "add",
            "bob",
            "--password-stdin",
            "--data-dir",
            str(engine.data_dir),
            stdin="short\n",
        ),
        "at least 8 characters",
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("serve", "--port", "70000"), "--port"),
        (
            ("serve", "--data-dir", "/proc/fluksio-cannot-be-here"),
            "cannot create the data directory",
        ),
    ],
)
def test_serve_refuses_bad_options_in_one_sentence(args: tuple[str, ...], needle: str) -> None:
    done = fluksio(*args)
    assert done.returncode == 2
    assert needle in done.stderr and "Traceback" not in done.stderr


def test_serve_refuses_a_port_in_use(engine: EngineProcess, tmp_path: Path) -> None:
    port = engine.url.rsplit(":", 1)[1]
    done = fluksio("serve", "--port", port, "--data-dir", str(tmp_path / "other"))
    _assert_one_sentence_exit_2(done, f"cannot listen on 127.0.0.1:{port}")
