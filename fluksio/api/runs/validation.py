"""Checks of a flow that need more than one node at a time, as field-level errors."""

from __future__ import annotations

import ast
import sys

from fluksio.api.errors import InvalidInput
from fluksio.api.runs.models import FlowSpec, find_cycle

__all__ = ["check_flow"]


def check_flow(flow: FlowSpec) -> None:
    """Duplicate ids, unknown dependencies, cycles, and every node's syntax.

    Parsing is CPU work proportional to the flow's code: the caller runs this off the
    event loop, so a large flow never stalls the engine.
    """
    seen: dict[str, int] = {}
    for index, node in enumerate(flow.nodes):
        if node.id in seen:
            raise InvalidInput(
                f"nodes.{index}.id", f"{node.id!r} is already the id of nodes.{seen[node.id]}"
            )
        seen[node.id] = index
    for index, node in enumerate(flow.nodes):
        for position, dependency in enumerate(node.after):
            if dependency not in seen:
                raise InvalidInput(
                    f"nodes.{index}.after.{position}",
                    f"node {node.id!r} depends on {dependency!r}, which is not in this flow",
                )
            if dependency == node.id:
                raise InvalidInput(f"nodes.{index}.after.{position}", "a node cannot follow itself")
    cycle = find_cycle({node.id: node.after for node in flow.nodes})
    if cycle is not None:
        raise InvalidInput("nodes", f"dependency cycle: {' -> '.join(cycle)}")
    for index, node in enumerate(flow.nodes):
        try:
            # Parsed, not compiled to bytecode nor imported: nothing of it runs here.
            ast.parse(node.code, filename=f"<node {node.id}>")
        except SyntaxError as exc:
            where = f"node {node.id!r}"
            if node.worker is not None:
                version = ".".join(map(str, sys.version_info[:2]))
                where += f", checked with the engine's Python {version}"
            raise InvalidInput(
                f"nodes.{index}.code", f"line {exc.lineno}: {exc.msg} ({where})"
            ) from exc
        except ValueError as exc:  # null bytes in the source
            raise InvalidInput(f"nodes.{index}.code", str(exc)) from exc
