"""Checks of a flow that need more than one node at a time, as field-level errors."""

from __future__ import annotations

from fluksio.api.errors import InvalidInput
from fluksio.api.runs.models import FlowSpec, find_cycle

__all__ = ["check_flow"]


def check_flow(flow: FlowSpec) -> None:
    """Duplicate ids, unknown dependencies, cycles, and syntax of engine-compiled nodes."""
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
        if node.worker is None:
            try:
                compile(node.code, f"<node {node.id}>", "exec")
            except SyntaxError as exc:
                raise InvalidInput(
                    f"nodes.{index}.code", f"line {exc.lineno}: {exc.msg} (node {node.id!r})"
                ) from exc
            except ValueError as exc:  # null bytes in the source
                raise InvalidInput(f"nodes.{index}.code", str(exc)) from exc
