"""Running the real ``fluksio`` command, with no FLUKSIO_* variable leaking in from outside."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.engine import BIN


def fluksio(
    *args: str, env: dict[str, str] | None = None, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    return subprocess.run(
        [str(BIN / "fluksio"), *args],
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def follow_logs(api_url: str, token: str, run_id: str) -> subprocess.Popen[str]:
    """``fluksio runs logs RUN --follow`` started against ``api_url`` (its token in the
    environment), its output piped: the caller ends it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("FLUKSIO_")}
    return subprocess.Popen(
        [str(BIN / "fluksio"), "runs", "logs", run_id, "--follow"],
        env={**base, "FLUKSIO_URL": api_url, "FLUKSIO_TOKEN": token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def add_user(data_dir: Path, username: str, password: str) -> None:
    """A user (not a superuser) added to the engine at ``data_dir`` with ``fluksio users
    add``, the password on standard input as a person would type it."""
    added = fluksio(
        "users", "add", username, "--password-stdin", "--data-dir", str(data_dir),
        stdin=f"{password}\n",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
