"""The guide's batch section is the template: what it says a backend declares is what
:class:`BatchProvisioner` asks for, and the Grid Engine plugin (its worked example,
whose code blocks ``test_local_provisioner.py`` holds to the plugin's source) declares
all of it and nothing of the base's work.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from fluksio_gridengine import GridEngineProvisioner

from fluksio.provisioners import BatchProvisioner

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "writing-a-provisioner.md"


def _declared_members() -> set[str]:
    """The members under "what a backend declares" in the base's source."""
    source = inspect.getsource(BatchProvisioner)
    declared = source.split("# -- what a backend declares")[1].split("# -- what the base does")[0]
    tree = ast.parse("class _:\n" + declared.split("\n", 1)[1])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
    return names


def _guide_table() -> set[str]:
    section = GUIDE.read_text().split("### The class: what a backend declares")[1]
    rows = re.findall(r"^\| `([^`]+)`(?:, `([^`]+)`)? \|", section.split("\n\n|")[1], re.M)
    return {name.split("(")[0] for row in rows for name in row if name}


def test_the_guide_names_every_member_a_backend_declares_and_no_other() -> None:
    declared = _declared_members()
    assert {"submit_command", "queue_command", "job_script", "parse_queue"} <= declared
    assert _guide_table() == declared


def test_the_grid_engine_plugin_declares_what_is_required_and_only_the_template() -> None:
    required = set(BatchProvisioner.__abstractmethods__) | {
        name for name in _declared_members() if not hasattr(BatchProvisioner, name)
    }
    assert required <= set(vars(GridEngineProvisioner)), "every required member, declared"
    assert not GridEngineProvisioner.__abstractmethods__
    # What it defines beyond the template: the provisioner's identity and one life-cycle
    # step the guide shows (`poll`, extended with `qstat -j`); nothing of the base's work.
    own = {name for name in vars(GridEngineProvisioner) if not name.startswith("_")}
    extra = own - _declared_members()
    assert extra == {"type_name", "settings_model", "job_noun", "walltime_s", "poll"}


def test_the_job_id_is_found_by_the_declared_pattern_and_its_absence_said() -> None:
    default = BatchProvisioner.parse_job_id  # the base's: job_id_pattern
    for printed in ("41;cluster\n", "41.server\n", "Job <41> is submitted to queue <normal>.\n"):
        assert default(GridEngineProvisioner.__new__(GridEngineProvisioner), printed) == "41"

    class Lettered(GridEngineProvisioner):
        job_id_pattern = r"job (?P<job_id>[a-z]+-\d+)"

    assert default(Lettered.__new__(Lettered), "queued job ab-7 on ring\n") == "ab-7"
    with pytest.raises(ValueError, match="qsub printed no job id: 'Submitted nothing'"):
        default(Lettered.__new__(Lettered), "Submitted nothing\n")
