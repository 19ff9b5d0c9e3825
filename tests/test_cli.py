"""The `fluksio` command line against a real engine; every user error is one sentence, with
exit code 2 (usage, or no engine) or 3 (the engine refused)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import fluksio
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD, EngineProcess
from tests.support.runs import code, run_flow
from tests.support.wait import wait_for
from tests.support.worker import start_worker

pytestmark = pytest.mark.process


def _assert_one_sentence_exit_2(
    done: subprocess.CompletedProcess[str], *needles: str, code: int = 2
) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
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
    assert engine.client(token).request("GET", "/workers/tokens/self").body["labels"] == [
        "gpu",
        "cuda12",
    ]

    listed = fluksio("tokens", "list", "--json", env=env)
    rows = json.loads(listed.stdout)
    assert [(r["name"], r["status"]) for r in rows] == [("gpu-dev", "active")]
    assert token not in listed.stdout

    revoked = fluksio("tokens", "revoke", rows[0]["jti"], env=env)
    assert revoked.returncode == 0 and "Revoked 'gpu-dev'" in revoked.stdout
    assert engine.client(token).request("GET", "/workers/tokens/self").status == 401


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
        code=3,
    )
    _assert_one_sentence_exit_2(
        fluksio("tokens", "revoke", "f" * 32, env={"FLUKSIO_URL": engine.api, **creds}),
        "no worker token",
        code=3,
    )
    wrong = {"FLUKSIO_USERNAME": SUPERUSER, "FLUKSIO_PASSWORD": "nope-nope"}
    _assert_one_sentence_exit_2(
        fluksio("tokens", "list", env={"FLUKSIO_URL": engine.api, **wrong}),
        "incorrect username or password",
        code=3,
    )
    _assert_one_sentence_exit_2(
        fluksio("workers", "list", env={"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": "x.y.z"}),
        "the engine refused",
        code=3,
    )
    _assert_one_sentence_exit_2(
        fluksio("metrics", "token", "revoke", "nope", env={"FLUKSIO_URL": engine.api, **creds}),
        "no scrape token",
        code=3,
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


def test_every_screen_action_has_a_command(engine: EngineProcess, tmp_path: Path) -> None:
    env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": engine.login()}
    assert fluksio("workers", "list", env=env).stdout.strip() == "No workers attached."
    token = fluksio("tokens", "mint", "cli-box", "--labels", "cpu", env=env).stdout.strip()
    worker = start_worker(
        engine, token, tmp_path / "worker", "--name", "cli-box", "--labels", "cpu", "--cpus", "2"
    )
    try:

        def listed() -> list[dict[str, Any]] | None:
            done = fluksio("workers", "list", "--json", env=env)
            assert done.returncode == 0, done.stderr
            found: list[dict[str, Any]] = json.loads(done.stdout)
            return found or None

        (shown,) = wait_for(listed, timeout=30, what="the worker in `workers list --json`")
        assert shown["name"] == "cli-box" and shown["labels"] == ["cpu"]
        human = fluksio("workers", "list", env=env).stdout
        assert "cli-box" in human and "idle" in human and "cpus 2/2" in human

        resources = fluksio("workers", "resources", env=env)
        assert resources.returncode == 0, resources.stderr
        assert "cli-box" in resources.stdout and "engine" in resources.stdout
        assert json.loads(fluksio("workers", "resources", "--json", env=env).stdout)["places"]

        nowhere = {"id": "n", "worker": "tpu", "code": code("def process():\n    return 1\n")}
        run_id = run_flow(engine, env["FLUKSIO_TOKEN"], "needs-tpu", [nowhere])
        waiting = fluksio("workers", "waiting", env=env).stdout
        assert "needs-tpu/n" in waiting and "no attached worker carries label 'tpu'" in waiting
        (queued,) = json.loads(fluksio("workers", "waiting", "--json", env=env).stdout)
        assert queued["run_id"] == run_id
        cancelled = fluksio("runs", "cancel", run_id, env=env)
        assert cancelled.returncode == 0 and cancelled.stdout == f"run {run_id}: cancelled\n"
    finally:
        worker.stop()

    status = fluksio("provisioners", "status", env=env)
    assert status.returncode == 0 and "No provisioners configured." in status.stdout
    assert json.loads(fluksio("provisioners", "status", "--json", env=env).stdout) == []

    minted = fluksio("metrics", "token", "mint", "prometheus", env=env)
    assert minted.returncode == 0, minted.stderr
    scrape = minted.stdout.strip()
    assert engine.client(scrape).request("GET", "//metrics").status == 200
    rows = json.loads(fluksio("metrics", "token", "list", "--json", env=env).stdout)
    assert [r["name"] for r in rows] == ["prometheus"] and scrape not in str(rows)
    revoked = fluksio("metrics", "token", "revoke", rows[0]["id"], env=env)
    assert revoked.returncode == 0 and "Revoked scrape token 'prometheus'" in revoked.stdout
    assert engine.client(scrape).request("GET", "//metrics").status == 401


def test_runs_show_follow_reads_the_live_feed(engine: EngineProcess) -> None:
    env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": engine.login()}
    slow = "import time\n\ndef process():\n    time.sleep(1.5)\n    return 7\n"
    run_id = run_flow(engine, env["FLUKSIO_TOKEN"], "slow", [{"id": "n", "code": code(slow)}])
    followed = fluksio("runs", "show", run_id, "--follow", env=env)
    assert followed.returncode == 0, followed.stderr
    assert "succeeded" in followed.stdout and "-> 7" in followed.stdout

    def requests() -> list[str] | None:
        lines = [json.loads(line) for line in engine.log_path.read_text().splitlines()]
        paths = [line["path"] for line in lines if line.get("event") == "http.request"]
        return paths if "/api/v1/events" in paths else None

    paths = wait_for(requests, timeout=10, what="the feed's request in the engine's log")
    fetched = paths.count(f"/api/v1/runs/{run_id}")
    assert fetched <= 4, f"{fetched} fetches of a run with three changes: it polled"
    as_json = fluksio("runs", "show", run_id, "--follow", "--json", env=env)
    assert json.loads(as_json.stdout)["state"] == "succeeded"
    # Followed once it has ended, read as a log, the run's own line still comes last.
    again = fluksio("runs", "show", run_id, "--follow", env=env).stdout.splitlines()
    assert again[-1] == f"run {run_id} of 'slow': succeeded", again


def test_users_are_listed_given_a_role_and_removed_on_the_data_directory(
    engine: EngineProcess,
) -> None:
    data = ("--data-dir", str(engine.data_dir))
    added = fluksio("users", "add", "ada", "--password-stdin", *data, stdin="ada-password-1\n")
    assert added.returncode == 0, added.stderr
    listed = fluksio("users", "list", *data)
    assert "ada" in listed.stdout and "admin" in listed.stdout
    as_ada = {
        "FLUKSIO_URL": engine.api,
        "FLUKSIO_USERNAME": "ada",
        "FLUKSIO_PASSWORD": "ada-password-1",
    }
    assert fluksio("workers", "list", env=as_ada).returncode == 0
    refused = fluksio("tokens", "list", env=as_ada)
    assert refused.returncode == 3 and "not a superuser" in refused.stderr
    assert fluksio("users", "role", "ada", "superuser", *data).returncode == 0
    assert fluksio("tokens", "list", env=as_ada).returncode == 0
    assert fluksio("users", "remove", "ada", *data).returncode == 0
    gone = fluksio("tokens", "list", env=as_ada)
    assert gone.returncode == 3, gone.stderr
    last = fluksio("users", "remove", "admin", *data)
    assert last.returncode == 2 and "the only superuser" in last.stderr
    demoted = fluksio("users", "role", "admin", "user", *data)
    assert demoted.returncode == 2 and "the only superuser" in demoted.stderr, demoted
    assert "admin                            superuser" in fluksio("users", "list", *data).stdout


def test_a_personal_token_is_minted_used_and_revoked_from_the_command_line(
    engine: EngineProcess,
) -> None:
    as_admin = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": engine.login()}
    minted = fluksio("personal-tokens", "mint", "cron", "--days", "7", "--json", env=as_admin)
    assert minted.returncode == 0, minted.stderr
    token, token_id = json.loads(minted.stdout)["token"], json.loads(minted.stdout)["id"]
    as_script = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": token}
    assert fluksio("workers", "list", env=as_script).returncode == 0
    listed = fluksio("personal-tokens", "list", env=as_admin)
    assert "cron" in listed.stdout and token not in listed.stdout
    assert fluksio("personal-tokens", "revoke", token_id, env=as_admin).returncode == 0
    refused = fluksio("workers", "list", env=as_script)
    assert refused.returncode == 3 and "personal token 'cron' is revoked" in refused.stderr


def test_runs_list_filters_and_takes_url_after_the_command(engine: EngineProcess) -> None:
    token = engine.login()
    done = run_flow(
        engine, token, "listed", [{"id": "n", "code": "def process():\n    return 1\n"}]
    )
    other = run_flow(engine, token, "unlisted", [{"id": "n", "code": "def process():\n    x\n"}])
    as_token = {"FLUKSIO_TOKEN": token}  # no FLUKSIO_URL: --url after the command says where
    wait_for(
        lambda: (
            str(fluksio("runs", "show", other, "--url", engine.api, env=as_token).stdout)
            .splitlines()[0]
            .endswith("failed")
        ),
        timeout=30,
        what="the failing run to end",
    )
    listed = fluksio(
        "runs", "list", "--flow", "listed", "--since", "1h", "--url", engine.api, env=as_token
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["RUN", "FLOW", "STATE", "CREATED", "TOOK"]
    assert [line.split()[:2] for line in lines[1:]] == [[done, "listed"]]
    failed = fluksio("runs", "list", "--state", "failed", "--url", engine.api, env=as_token)
    assert other in failed.stdout and done not in failed.stdout
    future = fluksio(
        "runs", "list", "--since", "2999-01-01T00:00Z", "--url", engine.api, env=as_token
    )
    assert future.stdout == "No runs.\n", future
    _assert_one_sentence_exit_2(
        fluksio("runs", "list", "--since", "yesterday", "--url", engine.api, env=as_token),
        "--since takes a time ago like 30m, 2h or 7d",
    )


def test_runs_logs_prints_every_attempt_as_follow_does(
    engine: EngineProcess, tmp_path: Path
) -> None:
    token = engine.login()
    counter = tmp_path / "tries"
    flaky = code(f"""
        import os
        def process():
            tries = len(open({str(counter)!r}).read()) if os.path.exists({str(counter)!r}) else 0
            open({str(counter)!r}, "a").write("x")
            print(f"attempt {{tries + 1}} says hello")
            if tries == 0:
                raise ValueError("the first attempt fails")
            return "second"
    """)
    retry = {"on": ["NodeError"], "times": 1, "backoff_s": 0}
    run_id = run_flow(engine, token, "flaky", [{"id": "n", "code": flaky, "retry": retry}])
    env = {"FLUKSIO_URL": engine.api, "FLUKSIO_TOKEN": token}
    wait_for(
        lambda: "succeeded" in fluksio("runs", "show", run_id, env=env).stdout.splitlines()[0],
        timeout=30,
        what="the second attempt to succeed",
    )
    for follow in ([], ["--follow"]):
        printed = fluksio("runs", "logs", run_id, *follow, env=env)
        assert printed.stdout.splitlines() == [
            "attempt 1 says hello",
            "--- attempt 2 ---",
            "attempt 2 says hello",
        ], (follow, printed.stdout)
