"""Every Python example in docs/python.md runs as it is, against a real engine.

Each block is run as a script of its own (a file: an executor reads its functions'
source), with ``$FLUKSIO_URL`` and the
superuser's credentials in its environment as a user's shell would have them; a block
that starts its own engine (``local()``) needs neither. A block that fails fails here,
with what it printed, and so does one that prints other than what its comment says
(``print(x)  # [0, 1]``).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.engine import EngineProcess

pytestmark = pytest.mark.process

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) >= 8
    assert any(".executor(" in block for block in BLOCKS)
    assert any("local()" in block for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"example{i}" for i in range(len(BLOCKS))])
def test_an_example_runs_as_written(
    shared_engine: EngineProcess, block: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "FLUKSIO_URL": shared_engine.url,
        "FLUKSIO_USERNAME": SUPERUSER,
        "FLUKSIO_PASSWORD": SUPERUSER_PASSWORD,
    }
    env.pop("FLUKSIO_TOKEN", None)
    script = tmp_path / "example.py"
    script.write_text(block)
    done = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    for said in _printed_literals(block):
        assert said in printed, f"the page says it prints {said}; it printed {printed}"


def _printed_literals(block: str) -> list[str]:
    """What the page says a line prints, where it says it as a literal
    (``print(...)  # [0, 1, 4, 9]``), as ``print`` writes it."""
    said = []
    for comment in re.findall(r"print\(.*\)\s+# (.+)$", block, flags=re.M):
        try:
            said.append(str(ast.literal_eval(comment)))
        except (ValueError, SyntaxError):
            continue  # a comment in words
    return said
