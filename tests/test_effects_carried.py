"""Each shell carries out every effect its machine can ask for, in a ``match`` that ends in
``assert_never``: mypy then refuses a new effect without its case. This holds the shape
that makes mypy's check possible, so that a shell turned back into a dict of handlers (a
KeyError at run time) or an isinstance chain (an effect silently dropped) fails here."""

from __future__ import annotations

import ast
import importlib
import types
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (the shell's module, the module declaring its effects, the union of them)
SHELLS = [
    ("fluksio/engine/dispatch/effects.py", "fluksio.engine.runs.machine.effects", "Effect"),
    ("fluksio/provisioners/driver.py", "fluksio.provisioners.machine.effects", "Effect"),
    ("fluksio/agent/carrying.py", "fluksio.agent.machine.agent_machine", "AgentEffect"),
    (
        "fluksio/engine/workers/session_effects.py",
        "fluksio.engine.workers.connection.effects",
        "ConnectionEffect",
    ),
]


def _members(union: object) -> set[str]:
    """The class names a union alias stands for, through unions nested in it."""
    names: set[str] = set()
    for arg in typing.get_args(union):
        if isinstance(arg, types.UnionType) or typing.get_origin(arg) is typing.Union:
            names |= _members(arg)
        else:
            names.add(arg.__name__)
    return names


def _cases(match: ast.Match) -> set[str]:
    """The class names a match statement's case patterns name, or-patterns included."""
    names: set[str] = set()
    for case in match.cases:
        patterns = (
            case.pattern.patterns if isinstance(case.pattern, ast.MatchOr) else [case.pattern]
        )
        for pattern in patterns:
            if isinstance(pattern, ast.MatchClass):
                cls = pattern.cls
                names.add(cls.attr if isinstance(cls, ast.Attribute) else ast.unparse(cls))
    return names


def _ends_in_assert_never(match: ast.Match) -> bool:
    last = match.cases[-1]
    return (
        isinstance(last.pattern, ast.MatchAs)
        and last.pattern.pattern is None
        and any(
            isinstance(node, ast.Call) and ast.unparse(node.func) == "assert_never"
            for node in ast.walk(ast.Module(body=last.body, type_ignores=[]))
        )
    )


@pytest.mark.parametrize(("shell", "module", "union"), SHELLS)
def test_every_effect_has_its_case_in_a_match_that_ends_in_assert_never(
    shell: str, module: str, union: str
) -> None:
    effects = _members(getattr(importlib.import_module(module), union))
    assert len(effects) > 3, f"{module}.{union} does not look like a union of effects"
    tree = ast.parse((ROOT / shell).read_text())
    matches = [
        node for node in ast.walk(tree) if isinstance(node, ast.Match) and _cases(node) & effects
    ]
    assert matches, f"{shell} carries out no {union} in a match"
    for match in matches:
        assert _ends_in_assert_never(match), (
            f"{shell}:{match.lineno}: a match over effects must end in 'case _: assert_never(...)'"
        )
    handled = set().union(*map(_cases, matches))
    missing = effects - handled
    assert not missing, f"{shell} has no case for {sorted(missing)}"
