"""Two distributions from one tree: the engine, and an agent that carries nothing of it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from fluksio.agent import runner
from tests.support.engine import start_engine
from tests.support.runs import run_flow, wait_run
from tests.support.worker import start_labelled_worker

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # Build from a copy so the checkout gains no build/ or egg-info directories.
    source = tmp_path_factory.mktemp("source")
    for name in ("fluksio", "packaging"):
        shutil.copytree(
            ROOT / name,
            source / name,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(out),
            str(source),
            str(source / "packaging" / "fluksio-worker"),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    found = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    return {"engine": found["fluksio"], "agent": found["fluksio_worker"]}


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(meta_name).decode())
    return names, {
        "Requires-Dist": meta.get_all("Requires-Dist") or [],
        "Version": [meta["Version"]],
    }


def test_agent_wheel_holds_only_the_agent(wheels: dict[str, Path]) -> None:
    names, meta = _metadata(wheels["agent"])
    code = [n for n in names if not n.split("/")[0].endswith(".dist-info")]
    assert code and all(n.startswith("fluksio/agent/") for n in code), code
    # The runner's modules, which every call's runner.py is made from.
    for module in ("__init__", *runner.MODULES):
        assert f"fluksio/agent/runner/{module}.py" in names, module
    # And every module of the agent: a subpackage left out of the list only fails at run.
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fluksio" / "agent").rglob("*.py")}
    assert on_disk <= set(names), sorted(on_disk - set(names))
    assert meta["Version"] == ["0.2.0"]
    assert sorted(r.split(">")[0].split("=")[0] for r in meta["Requires-Dist"]) == [
        "aiohttp",
        "click",
    ]


def test_engine_wheel_pins_our_agent_and_does_not_carry_it(wheels: dict[str, Path]) -> None:
    names, meta = _metadata(wheels["engine"])
    assert "fluksio/__init__.py" not in names
    assert not [n for n in names if n.startswith("fluksio/agent/")]
    assert "fluksio/api/app.py" in names and "fluksio/errors.py" in names
    # The Workers screen ships inside the package: an installed engine serves it offline.
    for page in ("workers.html", "workers.js", "workers.css"):
        assert f"fluksio/api/screen/static/{page}" in names
    # The programs the provisioners run on a login node or a host are files of the package.
    for program in (
        "deliver.sh",
        "batch_submit.sh",
        "batch_cancel.sh",
        "hosts/start.sh",
        "hosts/stop.sh",
    ):
        assert f"fluksio/provisioners/{program}" in names
    # Exactly 0.2.0: the published 0.1.x agent can never satisfy it.
    assert "fluksio-worker==0.2.0" in meta["Requires-Dist"]
    assert meta["Version"] == ["0.2.0"]


@pytest.mark.slow
def test_agent_installed_alone_runs_without_any_engine_dependency(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    env_dir = tmp_path / "agent-venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheels["agent"])],
        check=True,
        timeout=300,
        capture_output=True,
    )
    version = subprocess.run(
        [str(env_dir / "bin" / "fluksio-worker"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "0.2.0" in version.stdout
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.lower()
    for engine_only in ("pydantic", "pluggy", "asyncssh", "pyjwt", "structlog", "cryptography"):
        assert f"{engine_only}==" not in installed
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import fluksio.agent, importlib.util as u; print(u.find_spec('fluksio.api'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    assert probe.stdout.strip() == "None"

    # And it does its job: attaches to an engine and runs a call there.
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    try:
        admin = engine.login()
        worker = start_labelled_worker(
            engine,
            admin,
            "solo",
            tmp_path / "w",
            executable=env_dir / "bin" / "fluksio-worker",
            token_name="alone",
        )
        try:
            node = {"id": "n", "worker": "solo", "code": "def process():\n    return 'alone'\n"}
            run = wait_run(engine, admin, run_flow(engine, admin, "solo", [node]), timeout=60)
            assert (run["state"], run["nodes"][0]["result"]) == ("succeeded", "alone")
            assert run["nodes"][0]["ran_on"].startswith("alone/")
            cmdline = Path(f"/proc/{worker.pid}/cmdline").read_bytes()  # exec'd long ago
            assert str(env_dir).encode() in cmdline, "the agent from the fresh venv ran it"
        finally:
            worker.stop()
    finally:
        engine.stop()
