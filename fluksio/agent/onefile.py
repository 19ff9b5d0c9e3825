"""Packages made into one file: ``runner.py`` (what runs each call) and ``agent.py``.

A host that copies the runner or the agent gets one file; the engine and the agent run
the very same ``runner.py``. Each is made from its package's own modules, in dependency
order, with the imports between them removed, so it is never a second copy to keep in
step by hand. The runner's top-level names must be unique across its modules: a name
defined twice is refused when the file is made. (The agent's modules each keep a ``log``
of the same kind, which one file may share.)
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import stat
import tempfile
from pathlib import Path

from fluksio.agent import runner

__all__ = ["joined", "runner_path", "runner_source", "without_package_imports"]

_RUNNER_DIR = Path(runner.__file__).resolve().parent
# Each module has its own (its annotation-only block, its export list).
_SHARED_NAMES = frozenset({"TYPE_CHECKING", "__all__"})


def without_package_imports(source: str) -> str:
    """``source`` less its ``from __future__`` and ``fluksio`` imports, and docstring."""
    tree = ast.parse(source)
    drop: set[int] = set()
    for node in tree.body:
        module = node.module if isinstance(node, ast.ImportFrom) else None
        docstring = (
            node is tree.body[0]
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        if docstring or module == "__future__" or (module or "").startswith("fluksio"):
            end = node.end_lineno or node.lineno
            drop.update(range(node.lineno, end + 1))
    lines = source.splitlines()
    return "\n".join(line for number, line in enumerate(lines, 1) if number not in drop)


def _top_level_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - _SHARED_NAMES


def joined(directory: Path, modules: tuple[str, ...], *, unique: bool = True) -> str:
    """The modules of ``directory``, in order, as one body; with ``unique``, a top-level
    name two of them define is an error (in one file, the second would replace the first)."""
    parts: list[str] = []
    owner: dict[str, str] = {}
    for name in modules:
        source = (directory / f"{name}.py").read_text(encoding="utf-8")
        for defined in _top_level_names(source):
            if unique and defined in owner:
                raise ValueError(f"{defined} is defined in both {owner[defined]} and {name}.py")
            owner[defined] = f"{name}.py"
        parts += ["", f"# ---- {name}.py " + "-" * (70 - len(name)), ""]
        parts.append(without_package_imports(source))
    return "\n".join(parts)


@functools.cache
def runner_source() -> str:
    """``runner.py``: the runner package as the one file that runs every call."""
    docstring = ast.get_docstring(ast.parse((_RUNNER_DIR / "__init__.py").read_text()))
    return "\n".join(
        [
            f'"""{docstring}\n"""',
            "",
            "from __future__ import annotations",
            joined(_RUNNER_DIR, runner.MODULES),
            "",
            "",
            'if __name__ == "__main__":',
            "    sys.exit(main(sys.argv))",
            "",
        ]
    )


_written_at: list[Path] = []


def runner_path() -> Path:
    """Where ``runner.py`` is, written once per version into this user's cache.

    Named by its hash, so every process of one version shares one file and a new version
    never runs an old one; written to a temporary name and renamed, so a reader never
    sees half of it. Without a writable cache directory, a private temporary one serves.
    Written again if something (a cleaner of caches) removed it.
    """
    if _written_at and _written_at[0].exists():
        return _written_at[0]
    _written_at[:] = [_write_runner()]
    return _written_at[0]


def _write_runner() -> Path:
    text = runner_source().encode()
    name = f"runner-{hashlib.sha256(text).hexdigest()[:20]}.py"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    for directory in (
        Path(cache) / "fluksio",
        Path(tempfile.gettempdir()) / f"fluksio-{os.getuid()}",
    ):
        try:
            return _written(directory, name, text)
        except OSError:
            continue
    return _written(Path(tempfile.mkdtemp(prefix="fluksio-runner-")), name, text)


def _written(directory: Path, name: str, text: bytes) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # What runs every call must be ours alone: a directory another user made first (in a
    # shared /tmp), or one others may write to, could have the file swapped after it is
    # checked. Such a directory is passed over.
    found = os.lstat(directory)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        raise PermissionError(f"{directory} is not this user's alone")
    path = directory / name
    try:
        if path.read_bytes() == text:
            return path
    except OSError:
        pass
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".runner-", suffix=".py")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
