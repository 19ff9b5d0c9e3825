"""Reading the tree's own source: its modules, their imports, as the code rules see them."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "PACKAGE",
    "ROOT",
    "STDLIB",
    "files_under",
    "imports",
    "module_name",
    "top",
    "violations",
    "within",
]

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGE = ROOT / "fluksio"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_of(path: Path) -> str:
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(path).split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join([*base, node.module] if node.module else base)
            else:
                yield node.lineno, node.module or ""


def files_under(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py")) if folder.exists() else []


def top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(files: list[Path], allowed: Callable[[str], bool]) -> list[str]:
    found = []
    for path in files:
        for line, name in imports(path):
            if not allowed(name):
                found.append(f"{path.name}:{line} imports {name}")
    return found


# -- the rules, one predicate each: True when a layer may import the module named ----------
