"""An engine provisioning from the local Slurm, as the Slurm contract tests start one.

The fixtures are imported by name into each test module that uses them (``slurm`` for the
module, ``no_job_outlives_its_test`` on every test, ``start`` for engines).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.certs import KeyPair
from tests.support.cli import fluksio
from tests.support.engine import (
    EngineProcess,
    ProvisionedEngines,
    attach_url_on,
    free_port,
    start_engine,
    write_provisioners,
)
from tests.support.runs import code
from tests.support.slurm import LocalSlurm, local_slurm, slurm_provisioner
from tests.support.wait import wait_for

__all__ = [
    "NODE",
    "check_ssh",
    "log_out",
    "no_job_outlives_its_test",
    "profile_view",
    "resources_of",
    "restart_engine",
    "short_partition",
    "slurm",
    "slurm_data_dir",
    "start",
    "wait_error",
]

NODE = code(
    """
    import os

    def process():
        return {"job": os.environ.get("SLURM_JOB_ID"), "user": os.environ.get("USER")}
    """
)


@pytest.fixture(scope="module")
def slurm() -> LocalSlurm:
    return local_slurm()


@pytest.fixture(autouse=True)
def no_job_outlives_its_test(slurm: LocalSlurm, tmp_path: Path) -> Iterator[None]:
    # Set up first, so torn down last: after the test's engines have stopped. Only the
    # jobs of this test's engines (their data directories are under its tmp_path).
    yield
    slurm.cancel_leftovers(tmp_path)


@pytest.fixture
def start(tmp_path: Path, slurm: LocalSlurm) -> Iterator[Any]:
    engines = ProvisionedEngines(tmp_path)

    def start_with(tls: KeyPair | None = None, **changes: Any) -> tuple[EngineProcess, str]:
        """An engine with one Slurm provisioner; with ``tls`` it serves HTTPS and WSS, and
        its jobs' workers dial ``wss://``."""
        port = free_port()
        args: tuple[str, ...] = ()
        if tls is not None:
            args = ("--tls-cert", str(tls.cert), "--tls-key", str(tls.key))
            changes.setdefault("engine_url", attach_url_on(port, "wss"))
        config = [slurm_provisioner(slurm, port, **changes)]
        return engines.start(tmp_path / f"data{len(engines.started)}", config, port, args)

    yield start_with
    engines.stop_all()
    for index in range(len(engines.started)):  # what an engine killed mid-test left open
        log_out(tmp_path / f"data{index}")


def log_out(data_dir: Path) -> None:
    """Close an openssh provisioner's shared connection (an engine SIGKILLed leaves its own)."""
    if '"openssh"' in (data_dir / "provisioners.json").read_text():
        fluksio("provisioners", "logout", "hpc", "--data-dir", str(data_dir))


def resources_of(engine: EngineProcess, token: str) -> dict[str, Any]:
    answer = engine.client(token).request("GET", "/workers/resources")
    assert answer.status == 200, answer
    body: dict[str, Any] = answer.body
    return body


def profile_view(engine: EngineProcess, token: str) -> dict[str, Any]:
    (provisioner,) = resources_of(engine, token)["provisioners"]
    (profile,) = provisioner["profiles"]
    assert provisioner["name"] == "hpc" and provisioner["type"] == "slurm"
    view: dict[str, Any] = profile
    return view


def wait_error(engine: EngineProcess, token: str, what: str) -> dict[str, Any]:
    """The profile's last error, once there is one."""

    def recorded() -> dict[str, Any] | None:
        error: dict[str, Any] | None = profile_view(engine, token)["last_error"]
        return error

    return wait_for(recorded, timeout=30, what=what)


def slurm_data_dir(tmp_path: Path, slurm: LocalSlurm, **changes: Any) -> tuple[Path, int]:
    """A data directory (for an engine, then perhaps its restart) and the engine's port,
    its provisioners.json the local cluster's (``changes`` as :func:`slurm_provisioner`
    takes them)."""
    port = free_port()
    data_dir = tmp_path / "data"
    write_provisioners(data_dir, [slurm_provisioner(slurm, port, **changes)])
    return data_dir, port


def restart_engine(data_dir: Path, tmp_path: Path, port: int) -> tuple[EngineProcess, str]:
    """An engine started again on ``data_dir`` and ``port``, and a login to it."""
    engine = start_engine(data_dir, tmp_path / "logs2", port=port)
    return engine, engine.login()


def check_ssh(slurm: LocalSlurm, tmp_path: Path, **changes: Any) -> Any:
    """``fluksio provisioners check --ssh`` on one Slurm provisioner (``changes`` as
    :func:`slurm_provisioner` takes them)."""
    path = tmp_path / "provisioners.json"
    path.write_text(json.dumps([slurm_provisioner(slurm, 1, **changes)]))
    data = tmp_path / "data"
    return fluksio("provisioners", "check", "--file", str(path), "--ssh", "--data-dir", str(data))


@contextlib.contextmanager
def short_partition() -> Iterator[str]:
    """A partition of the test's own with a two-minute time limit, removed after: its
    name (the process's pid in it, so parallel checkouts never share one)."""
    partition = f"fluksio-short-{os.getpid()}"
    made = ["scontrol", "create", f"PartitionName={partition}", "Nodes=ALL", "MaxTime=2"]
    subprocess.run(made, check=True, capture_output=True, timeout=30)
    try:
        yield partition
    finally:
        subprocess.run(["scontrol", "delete", f"PartitionName={partition}"], timeout=30)
