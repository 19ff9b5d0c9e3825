"""What a Python function must be to run as a node elsewhere, and the node it becomes.

A function travels as its source, so it must be one whose source means the same on
another machine: defined with ``def`` at a module's top level (not a lambda, not inside
another function, not a method), using no variable of an enclosing function, and naming
no module-level name of its own module (a module it uses is imported inside it, or named
in the executor's ``imports``). Its arguments and its result travel as JSON; bytes and
files travel as artifacts. Each rule is checked when the call is submitted, and said in
one sentence, so that nothing that cannot travel fails later on a worker.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import json
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from fluksio.client.errors import CannotSend

__all__ = ["CannotSend", "check_arguments", "flow_name", "node_code"]


def node_code(fn: Callable[..., Any], imports: Sequence[str] = ()) -> str:
    """The source of a node whose ``process(args, kwargs)`` calls ``fn(*args, **kwargs)``."""
    name = getattr(fn, "__name__", repr(fn))
    if not inspect.isfunction(fn):
        raise CannotSend(f"{name} is not a function defined with def; only those can be sent")
    if name == "<lambda>":
        raise CannotSend("a lambda cannot be sent: define the function with def at module level")
    if "<locals>" in fn.__qualname__ or "." in fn.__qualname__:
        raise CannotSend(
            f"{name} is defined inside {fn.__qualname__.rsplit('.', 1)[0]}; only a function"
            " defined at a module's top level can be sent"
        )
    if fn.__closure__:
        raise CannotSend(f"{name} uses variables of the function around it; pass them as arguments")
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError):
        raise CannotSend(
            f"the source of {name} cannot be read (defined at an interactive prompt?); define"
            " it in a file or a notebook cell"
        ) from None
    _check_names(fn, name, tree, imports)
    definition = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    definition.decorator_list = []  # a decorator is not part of what runs there
    lines = [*(_import_line(entry) for entry in imports), "", ast.unparse(definition), ""]
    lines += [
        f"_fluksio_target = {name}",
        "",
        "",
        "def process(args, kwargs):",
        "    return _fluksio_target(*args, **kwargs)",
        "",
    ]
    return "\n".join(lines)


def flow_name(fn: Callable[..., Any], content: object) -> str:
    """A flow's name for ``fn`` with ``content``: the same content, the same flow."""
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:12]
    return f"py.{fn.__name__[:40]}.{digest}"


def check_arguments(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse an argument that is not JSON, naming it."""
    for index, value in enumerate(args, 1):
        _check_json(value, f"argument {index} of {name}")
    for key, value in kwargs.items():
        _check_json(value, f"argument {key}= of {name}")


def _check_json(value: object, what: str) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        kind = type(value).__name__
        raise CannotSend(
            f"{what} is not JSON (a {kind}): pass numbers, text, lists and dicts, and bytes"
            " or files as artifacts (client.put_artifact)"
        ) from None


def _check_names(
    fn: Callable[..., Any], name: str, tree: ast.Module, imports: Sequence[str]
) -> None:
    """Refuse a function that reads module-level names it would not have there."""
    named = {_bound_name(entry) for entry in imports}
    # getclosurevars lists the attributes read (x.shape) among the unbound names too: only
    # what the source reads as a variable counts.
    variables = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    variables -= set(fn.__code__.co_varnames)  # its own: arguments, imports inside it
    seen = inspect.getclosurevars(fn)
    missing = sorted(
        n
        for n in {*seen.globals, *seen.unbound} & variables
        if n not in named and not hasattr(builtins, n) and n != name
    )
    if missing:
        listed = ", ".join(missing)
        raise CannotSend(
            f"{name} uses {listed} from its module, which does not travel with it: import"
            " it inside the function, or name it in the executor's imports"
        )


def _import_line(entry: str) -> str:
    """``"numpy as np"`` or ``"from math import sqrt"`` as an import statement."""
    entry = entry.strip()
    return entry if entry.startswith(("import ", "from ")) else f"import {entry}"


def _bound_name(entry: str) -> str:
    """The name an ``imports`` entry binds: ``np`` for ``numpy as np``, ``sqrt`` for
    ``from math import sqrt``, ``os`` for ``os.path``."""
    statement = ast.parse(_import_line(entry)).body[0]
    if not isinstance(statement, ast.Import | ast.ImportFrom) or len(statement.names) != 1:
        raise CannotSend(f"imports: {entry!r} is not one import (such as 'numpy as np')")
    alias = statement.names[0]
    if alias.asname:
        return alias.asname
    return alias.name.split(".")[0]
