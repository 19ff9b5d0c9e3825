"""``agent.py``: the whole agent in one file, for a host where pip is not an option.

Copied beside ``runner.py`` (``GET /api/v1/workers/runtime``) it runs as
``python agent.py --url ...`` under any Python with aiohttp and click. It is generated
from this package's own modules, in dependency order, with the imports between them
removed, so it is never a second copy to keep in step by hand. The engine serves it at
``GET /api/v1/workers/agent.py``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from fluksio.agent import __version__

__all__ = ["MODULES", "build_standalone_agent"]

MODULES = (
    "errors",
    "frames",
    "inventory",
    "urls",
    "walltime",
    "outcome",
    "launcher",
    "session",
    "cli",
)
"""The agent's modules, each after those it imports."""

_HERE = Path(__file__).resolve().parent


def _without_package_imports(source: str) -> str:
    """``source`` less its ``from __future__`` and ``fluksio.agent`` imports, and docstring."""
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


@functools.cache
def build_standalone_agent() -> str:
    parts = [
        "#!/usr/bin/env python3",
        f'"""fluksio-worker {__version__}, standalone: run beside runner.py as'
        " `python agent.py --url ...`.",
        "",
        "Generated from the fluksio.agent package; needs aiohttp and click.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import os as _os",
        "import sys as _sys",
        "",
        "# runner.py lies beside this file.",
        "_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))",
        "import runner  # noqa: E402",
        "",
        f'__version__ = "{__version__}"',
    ]
    for name in MODULES:
        source = (_HERE / f"{name}.py").read_text()
        parts += ["", f"# ---- {name}.py " + "-" * (70 - len(name)), ""]
        parts.append(_without_package_imports(source))
    parts += ["", "", 'if __name__ == "__main__":', "    main()", ""]
    return "\n".join(parts)
