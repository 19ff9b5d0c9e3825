"""The node never reads its worker's token (issue 65, item 2): an agent run as an
unprivileged user, as docs/workers.md advises, with its token in ``$FLUKSIO_WORKER_TOKEN``
or given as ``--token``; a node on it looks through every process its user may read
(``/proc/PID/environ`` and ``cmdline``) and finds it nowhere. The agent is
the job user's (the local Slurm's virtualenv: root's Python is not theirs to run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine import EngineProcess, start_engine
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.slurm import job_writable_folder, local_slurm
from tests.support.worker import start_worker

pytestmark = pytest.mark.process

LOOKS = code("""
    import os
    def process(needle):
        read, found = 0, []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            for part in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as seen:
                        text = seen.read()
                except OSError:
                    continue
                read += 1
                if needle.encode() in text:
                    found.append(f"{pid}/{part}")
        return {"read": read, "found": found, "agent": os.getppid()}
""")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EngineProcess]:
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    yield engine
    engine.stop()


@pytest.fixture
def folder() -> Iterator[Path]:
    yield from job_writable_folder("fluksio-secrecy-")


@pytest.mark.parametrize("given", ["environment", "flag"])
def test_a_node_of_the_agents_user_finds_its_worker_token_nowhere(
    engine: EngineProcess, folder: Path, tmp_path: Path, given: str
) -> None:
    slurm = local_slurm()
    user = slurm.login.split("@")[0]
    admin = engine.login()
    token = engine.mint(admin, "box", ["box"])["token"]
    flag = ["--token", token] if given == "flag" else []
    worker = start_worker(
        engine,
        "" if flag else token,
        tmp_path / "w",
        "--labels",
        "box",
        *flag,
        executable=Path(slurm.worker),
        cwd=folder,
        env={"HOME": str(folder)},
        user=user,
    )
    try:
        node = {"id": "n", "worker": "box", "code": LOOKS, "params": {"needle": token[-24:]}}
        run = wait_run(engine, admin, run_flow(engine, admin, "looks", [node]), timeout=60)
    finally:
        worker.stop()
    looked: dict[str, Any] = nodes_of(run)["n"]["result"]
    assert run["state"] == "succeeded", run
    assert looked["read"] > 4, "it could read its own user's processes"
    assert looked["found"] == [], f"the token was readable in {looked['found']}"
