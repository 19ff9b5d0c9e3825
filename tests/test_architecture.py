"""The layering of docs/architecture.md, checked mechanically on every import statement.

Every ``import`` in the tree counts, including those under ``TYPE_CHECKING``: a layer that
may not import another may not name its types either.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fluksio"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
SHARED = ("fluksio.errors", "fluksio.names", "fluksio.validation")
"""Top-level modules every engine layer may use: the error root and the vocabulary."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path).split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join([*base, node.module] if node.module else base)
            else:
                yield node.lineno, node.module or ""


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py")) if folder.exists() else []


def _top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(files: list[Path], allowed: Callable[[str], bool]) -> list[str]:
    found = []
    for path in files:
        for line, name in _imports(path):
            if not allowed(name):
                found.append(f"{path.name}:{line} imports {name}")
    return found


def test_fluksio_is_a_namespace_package() -> None:
    assert not (PACKAGE / "__init__.py").exists(), (
        "fluksio/__init__.py would belong to one distribution and break the other's import"
    )


def test_scheduler_imports_only_the_standard_library() -> None:
    files = _files(PACKAGE / "scheduler")
    assert files
    assert (
        _violations(files, lambda name: _top(name) in STDLIB or _within(name, "fluksio.scheduler"))
        == []
    )


def test_agent_imports_nothing_of_the_engine() -> None:
    allowed_third_party = {"aiohttp", "click"}
    assert (
        _violations(
            _files(PACKAGE / "agent"),
            lambda name: (
                _top(name) in STDLIB
                or _top(name) in allowed_third_party
                or _within(name, "fluksio.agent")
            ),
        )
        == []
    )


def test_runner_imports_only_the_standard_library() -> None:
    runners = [
        p for p in _files(PACKAGE / "agent") if p.stem.startswith("runner") or "runner" in p.parts
    ]
    assert (
        _violations(
            runners, lambda name: _top(name) in STDLIB or _within(name, "fluksio.agent.runner")
        )
        == []
    )


def test_error_root_imports_only_the_standard_library() -> None:
    assert _violations([PACKAGE / "errors.py"], lambda name: _top(name) in STDLIB) == []


def test_provisioners_import_scheduler_types_and_their_own_libraries_only() -> None:
    transport = PACKAGE / "provisioners" / "transport.py"
    ordinary = [p for p in _files(PACKAGE / "provisioners") if p != transport]
    allowed = ("fluksio.scheduler", "fluksio.provisioners", *SHARED)

    def ok(name: str) -> bool:
        return (
            _top(name) in STDLIB
            or _top(name) in {"pluggy", "pydantic", "structlog"}
            or any(_within(name, prefix) for prefix in allowed)
        )

    assert _violations(ordinary, ok) == []
    assert (
        _violations(
            [p for p in [transport] if p.exists()],
            lambda name: ok(name) or _top(name) == "asyncssh",
        )
        == []
    )


def test_only_the_engine_imports_the_engine() -> None:
    outside = [p for p in _files(PACKAGE) if not _within(_module_name(p), "fluksio.api")]
    assert _violations(outside, lambda name: not _within(name, "fluksio.api")) == []


def test_plugins_use_the_public_provisioner_api_only() -> None:
    assert (
        _violations(
            _files(ROOT / "plugins"),
            lambda name: (
                not _within(name, "fluksio")
                or _within(name, "fluksio.provisioners")
                or _within(name, "fluksio.scheduler")
                or _within(name, "fluksio.errors")
            ),
        )
        == []
    )


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """Guard against a checker that passes everything: feed it forbidden imports."""
    probe = tmp_path / "probe.py"
    probe.write_text("import aiohttp\nfrom fluksio.api import app\nimport json\n")
    found = _violations([probe], lambda name: _top(name) in STDLIB)
    assert found == ["probe.py:1 imports aiohttp", "probe.py:2 imports fluksio.api"]
