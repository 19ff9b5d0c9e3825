"""Classes are made of parts, not cut into mixins (issue 66): a class with bases of our own
counts their lines as its own, under the module ceiling; and no class stubs, under
``TYPE_CHECKING``, the methods "the class it is mixed into" gives. Each rule has a probe
that shows it can fail."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.support.code import PACKAGE, ROOT, files_under
from tests.test_code_rules import MAX_MODULE_LINES


@dataclass(frozen=True)
class _Class:
    where: str
    lines: int
    bases: tuple[str, ...]
    stubs: int
    """Methods it declares under ``if TYPE_CHECKING:``."""


def _classes(files: list[Path]) -> dict[str, list[_Class]]:
    found: dict[str, list[_Class]] = {}
    for path in files:
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = tuple(b.id for b in node.bases if isinstance(b, ast.Name))
            stubs = sum(
                isinstance(inner, ast.FunctionDef)
                for block in node.body
                if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                for inner in block.body
            )
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            found.setdefault(node.name, []).append(_Class(name, lines, bases, stubs))
    return found


def _whole(found: _Class, classes: dict[str, list[_Class]], seen: set[str]) -> int:
    """A class's lines with those of every base of ours (once each)."""
    return found.lines + sum(_base(base, classes, seen) for base in found.bases)


def _base(name: str, classes: dict[str, list[_Class]], seen: set[str]) -> int:
    if name in seen or len(classes.get(name, [])) != 1:
        return 0  # not ours, or a name two classes share: not followed
    seen.add(name)
    return _whole(classes[name][0], classes, seen)


def _broken(files: list[Path]) -> dict[str, str]:
    classes = _classes(files)
    broken = {}
    for name, kinds in classes.items():
        for found in kinds:
            whole = _whole(found, classes, set())
            if whole > MAX_MODULE_LINES:
                broken[name] = f"{found.where}: {name} with its bases is {whole} lines"
            if found.stubs:
                broken[name] = f"{found.where}: {name} stubs {found.stubs} method(s)"
    return broken


def test_no_class_with_its_bases_is_over_the_ceiling_nor_stubs_another() -> None:
    assert _broken(files_under(PACKAGE)) == {}


def test_the_class_rules_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_MODULE_LINES // 2))
    probe.write_text(
        f"class Base:\n{body}\n\n"
        f"class Mixed(Base):\n{body}\n\n"
        "class Stubbing:\n    if TYPE_CHECKING:\n        def given(self) -> None: ...\n"
    )
    assert set(_broken([probe])) == {"Mixed", "Stubbing"}
