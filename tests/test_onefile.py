"""runner.py, made from the runner package: one file, ours alone, refusing to shadow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fluksio.agent import onefile, runner
from fluksio.agent.onefile import joined, runner_source
from fluksio.agent.standalone import MODULES, build_standalone_agent


def test_runner_py_holds_every_module_once_and_compiles() -> None:
    source = runner_source()
    compile(source, "runner.py", "exec")
    for module in runner.MODULES:
        assert source.count(f"# ---- {module}.py ") == 1, module
    assert "from fluksio" not in source, "runner.py imports nothing of Fluksio"


def test_agent_py_holds_every_agent_module_and_names_nothing_it_does_not_define(
    tmp_path: Path,
) -> None:
    """A module left out of the standalone agent's list fails only where its names are
    used (a container's call); ruff's undefined-name check finds it in the one file."""
    agent = tmp_path / "agent.py"
    agent.write_text(build_standalone_agent())
    ruff = Path(sys.executable).with_name("ruff")
    checked = subprocess.run(
        [str(ruff), "check", "--isolated", "--select", "F821", "--output-format", "concise",
         str(agent)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout
    package = Path(onefile.__file__).parent
    modules = {p.relative_to(package).with_suffix("").as_posix() for p in package.rglob("*.py")}
    left_out = {m for m in modules - set(MODULES) if not m.startswith("runner/")}
    # Empty package files, the machine's test reference, and what builds this file.
    assert left_out == {
        "__init__",
        "machine/__init__",
        "protocol/__init__",
        "machine/reference",
        "onefile",
        "standalone",
    }


def test_a_name_two_modules_define_is_refused_naming_both(tmp_path: Path) -> None:
    (tmp_path / "first.py").write_text("def helper():\n    return 1\n")
    (tmp_path / "second.py").write_text("def helper():\n    return 2\n")
    with pytest.raises(ValueError, match=r"helper is defined in both first\.py and second\.py"):
        joined(tmp_path, ("first", "second"))
    assert "return 2" in joined(tmp_path, ("first", "second"), unique=False)


def test_a_cache_directory_others_may_write_to_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "cache" / "fluksio"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = onefile._write_runner()
    assert path.parent != shared, "what runs every call is never where others may swap it"
    assert path.read_text() == runner_source()
    owner = os.lstat(path.parent)
    assert owner.st_uid == os.getuid() and not owner.st_mode & 0o022

    shared.chmod(0o700)
    assert onefile._write_runner().parent == shared
