"""What a batch backend costs to write (issue 37): the lines of the Slurm backend and of
the Grid Engine plugin, now and at an earlier commit, beside the base they stand on.

"code" counts lines that are neither blank, nor comments, nor docstrings (shell programs:
neither blank nor comments); "lines" counts every line of the ``.py`` and ``.sh`` files.

Run: ``.venv/bin/python bench/backend_size.py [--before REV]`` (default: the commit before
the batch base, e27f171).
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = {
    "Slurm backend": "fluksio/provisioners/slurm",
    "Grid Engine plugin": "plugins/gridengine/fluksio_gridengine",
    "batch base (batch.py, way_in.py)": (
        "fluksio/provisioners/batch.py fluksio/provisioners/way_in.py"
    ),
}
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
             tokenize.DEDENT, tokenize.ENDMARKER}  # fmt: skip


def code_lines(text: str, name: str) -> int:
    if name.endswith(".sh"):
        return sum(1 for line in text.splitlines() if line.strip() and line.strip()[0] != "#")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        for statement in body if isinstance(body, list) else []:
            if (
                isinstance(statement, ast.Expr)
                and isinstance(statement.value, ast.Constant)
                and isinstance(statement.value.value, str)
            ):
                docstrings.update(range(statement.lineno, (statement.end_lineno or 0) + 1))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type not in _NOT_CODE:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def measure(rev: str | None, paths: str) -> tuple[int, int, int]:
    """(files, lines, code lines) of the .py and .sh files under ``paths`` at ``rev``
    (None: the working tree)."""
    if rev is None:
        listed = [
            str(path.relative_to(ROOT))
            for part in paths.split()
            for path in ((ROOT / part).iterdir() if (ROOT / part).is_dir() else [ROOT / part])
        ]
    else:
        listed = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev, "--", *paths.split()],
            cwd=ROOT, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
    files = lines = code = 0
    for name in listed:
        if not name.endswith((".py", ".sh")):
            continue
        if rev is None:
            text = (ROOT / name).read_text()
        else:
            shown = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT,
                                   capture_output=True, text=True, check=True)  # fmt: skip
            text = shown.stdout
        files += 1
        lines += len(text.splitlines())
        code += code_lines(text, name)
    return files, lines, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="e27f171", help="the commit to compare with")
    args = parser.parse_args()
    print("| part | files before | lines before | code before | files now | lines now |"
          " code now | code now / before |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for label, paths in PARTS.items():
        before = measure(args.before, paths)
        now = measure(None, paths)
        ratio = f"{now[2] / before[2]:.2f}" if before[2] else "new"
        print(f"| {label} | {before[0]} | {before[1]} | {before[2]} | {now[0]} | {now[1]} |"
              f" {now[2]} | {ratio} |")  # fmt: skip


if __name__ == "__main__":
    main()
