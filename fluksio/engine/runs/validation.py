"""Checks of a flow that need more than one node at a time, as field-level errors."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable

from fluksio.engine.runs.calls import walltime_text
from fluksio.errors import InvalidInput
from fluksio.scheduler import Profile
from fluksio.wire.flows import FlowSpec

__all__ = ["check_flow", "find_cycle", "flow_warnings"]


def check_flow(flow: FlowSpec) -> None:
    """Duplicate ids, unknown dependencies, cycles, and the syntax of engine-bound nodes.

    A node bound to a worker (``worker`` set) is compiled where it runs, by that worker's
    Python: a syntax error there fails its call, naming that Python.

    Parsing is CPU work proportional to the flow's code: the caller runs this off the
    event loop, so a large flow never stalls the engine.
    """
    seen = _ids(flow)
    _check_dependencies(flow, seen)
    cycle = find_cycle({node.id: node.after for node in flow.nodes})
    if cycle is not None:
        raise InvalidInput("nodes", f"dependency cycle: {' -> '.join(cycle)}")
    for index, node in enumerate(flow.nodes):
        if node.worker is None:
            # One bound to a worker is compiled by that worker's Python, which may be newer
            # than the engine's: refusing here what this Python cannot parse would refuse
            # valid code.
            _check_syntax(index, node.id, node.code)


def _ids(flow: FlowSpec) -> dict[str, int]:
    """Each node's position by its id; a second node with an id is refused."""
    seen: dict[str, int] = {}
    for index, node in enumerate(flow.nodes):
        if node.id in seen:
            raise InvalidInput(
                f"nodes.{index}.id", f"{node.id!r} is already the id of nodes.{seen[node.id]}"
            )
        seen[node.id] = index
    return seen


def _check_dependencies(flow: FlowSpec, seen: dict[str, int]) -> None:
    for index, node in enumerate(flow.nodes):
        for position, dependency in enumerate(node.after):
            field = f"nodes.{index}.after.{position}"
            if dependency not in seen:
                raise InvalidInput(
                    field, f"node {node.id!r} depends on {dependency!r}, which is not in this flow"
                )
            if dependency == node.id:
                raise InvalidInput(field, "a node cannot follow itself")
            if flow.nodes[seen[dependency]].is_array:
                raise InvalidInput(
                    field,
                    f"node {node.id!r} is after {dependency!r}, an array: nothing may be after"
                    " an array (its results are read by pages, GET /runs/{id}/items)",
                )


def _check_syntax(index: int, node_id: str, code: str) -> None:
    try:
        # Parsed, not compiled to bytecode nor imported: nothing of it runs here.
        ast.parse(code, filename=f"<node {node_id}>")
    except SyntaxError as exc:
        version = ".".join(map(str, sys.version_info[:2]))
        raise InvalidInput(
            f"nodes.{index}.code",
            f"line {exc.lineno}: {exc.msg} (node {node_id!r}, checked with the engine's"
            f" Python {version})",
        ) from exc
    except ValueError as exc:  # null bytes in the source
        raise InvalidInput(f"nodes.{index}.code", str(exc)) from exc


def flow_warnings(flow: FlowSpec, profiles: Iterable[Profile], margin: float) -> list[str]:
    """What a person saving ``flow`` should know but may mean: a node that sets no limit,
    bound to a label only profiles whose jobs end carry, runs until its job has ``margin``
    seconds left and is stopped there. Sentences, never a refusal."""
    ending: dict[str, list[Profile]] = {}
    lasting: set[str] = set()
    for profile in profiles:
        for carried in profile.labels:
            if profile.walltime_s is None:
                lasting.add(carried)
            else:
                ending.setdefault(carried, []).append(profile)
    warnings = []
    for node in flow.nodes:
        label = node.worker
        if node.limit is not None or label is None or label in lasting or label not in ending:
            continue
        found = sorted(ending[label], key=lambda p: p.key)
        jobs = ", ".join(_what_a_job_gives(p, margin) for p in found)
        remedy = ' give it a "limit" to be placed where it fits'
        if all(margin + p.notice_s >= (p.walltime_s or 0) for p in found):
            remedy = " lower the engine's --walltime-margin-s, or" + remedy
        warnings.append(
            f"node {node.id!r} sets no limit, and every profile with {label!r} brings a job"
            f" that ends ({jobs}): it is stopped when its job has {margin:g} s left;{remedy}"
        )
    return warnings


def _what_a_job_gives(profile: Profile, margin: float) -> str:
    """A profile's job as a call without a limit gets it: when it is told, or never."""
    walltime = profile.walltime_s or 0.0
    said = f"{profile.key} after {walltime_text(walltime)}"
    if margin + profile.notice_s >= walltime:
        return (
            f"{said}, no longer than the {margin:g} s margin and its {profile.notice_s:g} s"
            " notice: it never goes there"
        )
    return f"{said}, told {profile.notice_s:g} s before"


def find_cycle(edges: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a list of node ids (first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dependency in edges.get(node, []):
            if state.get(dependency) == 1:
                return [*path[path.index(dependency) :], dependency]
            if dependency not in state and (found := visit(dependency)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state and (found := visit(node)) is not None:
            return found
    return None
