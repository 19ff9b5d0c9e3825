"""Which keyword arguments a node's function accepts, read from its source with ``ast``.

The node's module is never imported on the engine (it may import what only a worker has);
the same function-selection rule as the runner's is applied to the syntax tree.
"""

from __future__ import annotations

import ast
import functools

__all__ = ["accepted_names", "select_kwargs"]

_EVERYTHING = None


@functools.lru_cache(maxsize=1024)
def accepted_names(source: str) -> frozenset[str] | None:
    """Names the node's function takes by keyword; None when it takes ``**kwargs``
    (or when the source cannot be read here, so that the runner can say what is wrong)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _EVERYTHING
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    chosen = functions.get("process")
    if chosen is None:
        public = [f for name, f in functions.items() if not name.startswith("_")]
        if len(public) != 1:
            return _EVERYTHING
        chosen = public[0]
    arguments = chosen.args
    if arguments.kwarg is not None:
        return _EVERYTHING
    return frozenset(a.arg for a in [*arguments.args, *arguments.kwonlyargs])


def select_kwargs(source: str, available: dict[str, object]) -> dict[str, object]:
    names = accepted_names(source)
    if names is None:
        return dict(available)
    return {name: value for name, value in available.items() if name in names}
