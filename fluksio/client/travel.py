"""What a function takes with it to another machine: found from its source, transitively.

A function travels as source. What it reads from its module goes too, as the user wrote
it: a helper function or class defined in that module (its source, and in turn what it
reads), a module it uses (an import), a name imported from another module (an import of
that name), a constant of plain values (its value, written out). It works the same for a
module file, ``__main__`` and a notebook: only the source and the module's globals are
read. What cannot travel (an object with no source and no plain value: an open file, a
client, an array) is refused naming the name, the function and the line that reads it.

The code is laid out so that the function and its helpers keep their file's line
numbers where they can; :class:`Travelling` maps each line back, so a remote traceback
names the user's file and line (:meth:`Travelling.traceback`).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
import textwrap
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fluksio.client.errors import CannotSend

__all__ = ["Travelling", "gather"]

ENTRY = "process"
"""The name the runner calls: a node's entry point."""
_LITERAL_BYTES = 1 << 16
"""A constant written out is at most this long (a larger one belongs in an artifact)."""
_FRAME = re.compile(r'File "<node [^>]*>", line (\d+)')


@dataclass
class Travelling:
    """A function's node code, and where each of its lines came from."""

    source: str = ""
    origins: list[tuple[int, int, str, int]] = field(default_factory=list)
    """``(first, last, file, first line there)`` of each block copied from a file."""

    def traceback(self, text: str) -> str:
        """A remote traceback with each line of the node's code named by its file and
        line (``File "<node call>", line 12`` -> ``File "/home/me/sweep.py", line 40``)."""

        def named(found: re.Match[str]) -> str:
            line = int(found.group(1))
            for first, last, file, there in self.origins:
                if first <= line <= last:
                    return f'File "{file}", line {there + line - first}'
            return found.group(0)

        return _FRAME.sub(named, text)


@dataclass(frozen=True)
class _Definition:
    source: str
    file: str
    line: int
    """Its first line in ``file`` (its decorators' included)."""


def gather(fn: Callable[..., Any], imports: Sequence[str], wrapper: Sequence[str]) -> Travelling:
    """``fn``'s node code: the ``imports`` given, what it reads from its module, itself
    (decorators dropped), then ``wrapper`` (the lines that call it)."""
    name = fn.__name__
    lines, first_line = _source(fn)
    tree = ast.parse("".join(lines))
    definition = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    if fn.__closure__:
        free = fn.__code__.co_freevars[0]
        line = first_line + _first_use(tree, free) - 1
        raise CannotSend(
            f"{name} uses {free} ({_file_of(fn)}, line {line}), a variable of the function"
            " around it, which does not travel: pass it as an argument"
        )
    own = "".join(lines[definition.lineno - 1 :])  # without its decorators
    main = _Definition(own, _file_of(fn), first_line + definition.lineno - 1)
    found = _Found(fn.__globals__, {_bound_name(entry) for entry in imports} | {name})
    definition.decorator_list = []  # dropped from what travels: what they name need not
    found.visit(fn, tree, first_line)
    header = [
        "from __future__ import annotations",  # annotations name what need not travel
        *(_import_line(entry) for entry in imports),
        *found.imports,
        *found.constants,
    ]
    definitions = [*found.definitions, main]
    if ENTRY not in found.seen:
        return _laid_out(header, definitions, [f"_fluksio_target = {name}", "", "", *wrapper])
    # Its module has a "process" of its own (a common name), which the node's entry point
    # would replace: what travels runs in a namespace of its own, the entry point outside.
    inner = _laid_out(header, definitions, [])
    outer = [
        "_fluksio_module = {'__name__': '__fluksio_node__'}",
        f"exec(compile({inner.source!r}, '<node call>', 'exec'), _fluksio_module)",
        f"_fluksio_target = _fluksio_module[{name!r}]",
        "",
        "",
        *wrapper,
    ]
    return Travelling("\n".join(outer) + "\n", inner.origins)


class _Found:
    """What a function reads from its module, gathered by walking each helper in turn."""

    def __init__(self, module: dict[str, Any], given: set[str]) -> None:
        self.module = module
        self.seen = set(given)
        self.imports: list[str] = []
        self.constants: list[str] = []
        self.definitions: list[_Definition] = []

    def visit(self, owner: Callable[..., Any] | type, tree: ast.Module, first_line: int) -> None:
        local = _bound_inside(tree)
        hints = _in_annotations(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Name) or id(node) in hints:
                continue
            if node.id in self.seen or node.id in local or node.id not in self.module:
                continue  # a builtin, or a name bound at run time (it fails there as here)
            self.seen.add(node.id)
            self._take(node.id, self.module[node.id], owner, first_line + node.lineno - 1)

    def _take(self, name: str, value: Any, owner: Callable[..., Any] | type, line: int) -> None:
        if isinstance(value, types.ModuleType):
            module = value.__name__
            alias = "" if module == name else f" as {name}"
            self.imports.append(f"import {module}{alias}")
            return
        inner = inspect.unwrap(value) if inspect.isfunction(value) else value
        home = self.module.get("__name__")
        if (inspect.isfunction(inner) or inspect.isclass(inner)) and (
            inner.__module__ == home and "." not in inner.__qualname__
        ):
            lines, first = _source(inner)
            self.definitions.append(_Definition("".join(lines), _file_of(inner), first))
            self.visit(inner, ast.parse("".join(lines)), first)
            return
        imported = _importable(value, home)
        if imported is not None:
            module, attribute = imported
            alias = "" if attribute == name else f" as {name}"
            self.imports.append(f"from {module} import {attribute}{alias}")
            return
        literal = _literal(value)
        if literal is not None and len(literal) > _LITERAL_BYTES:
            raise CannotSend(
                f"{owner.__name__} uses {name} ({_file_of(owner)}, line {line}), a plain"
                f" value of {len(literal)} characters written out, over the {_LITERAL_BYTES}"
                " a constant may travel as: pass it as an argument, or as an artifact"
            )
        if literal is not None:
            self.constants.append(f"{name} = {literal}")
            return
        raise CannotSend(
            f"{owner.__name__} uses {name} ({_file_of(owner)}, line {line}), a"
            f" {type(value).__name__} with no source or plain value, which cannot travel:"
            " pass it as an argument, or make it inside the function"
        )


def _importable(value: Any, home: object) -> tuple[str, str] | None:
    """``(module, attribute)`` that ``value`` is importable as from another module (a
    function or class imported into the user's module, ``typing.List``), if any."""
    module = getattr(value, "__module__", None)
    if not isinstance(module, str) or module in (home, "__main__") or module not in sys.modules:
        return None
    found = sys.modules[module]
    for attribute in (getattr(value, "__qualname__", None), getattr(value, "__name__", None),
                      getattr(value, "_name", None)):  # fmt: skip
        if isinstance(attribute, str) and getattr(found, attribute, None) is value:
            return module, attribute
    return None


def _source(thing: Callable[..., Any] | type) -> tuple[list[str], int]:
    """A function's or class's source lines (dedented), and its first line in its file."""
    name = getattr(thing, "__name__", repr(thing))
    try:
        lines, first = inspect.getsourcelines(thing)
    except (OSError, TypeError):
        raise CannotSend(
            f"the source of {name} cannot be read (defined at an interactive prompt?); define"
            " it in a file or a notebook cell"
        ) from None
    return textwrap.dedent("".join(lines)).splitlines(keepends=True), max(first, 1)


def _file_of(thing: Any) -> str:
    try:
        return inspect.getsourcefile(thing) or "<unknown>"
    except TypeError:
        return "<unknown>"


def _first_use(tree: ast.AST, name: str) -> int:
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name]
    return min(lines, default=1)


def _in_annotations(tree: ast.AST) -> set[int]:
    """The names inside annotations: with ``from __future__ import annotations`` they are
    never evaluated, so they need not travel."""
    hints: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            hints.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            hints.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            hints.append(node.annotation)
    return {id(n) for hint in hints if hint is not None for n in ast.walk(hint)}


def _bound_inside(tree: ast.Module) -> set[str]:
    """Names a function or class binds itself: its arguments, assignments, imports, and
    what it defines inside (not its own name)."""
    bound: set[str] = set()
    top = tree.body[0] if tree.body else None
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and node is not top
        ):
            bound.add(node.name)
    return bound


def _literal(value: Any) -> str | None:
    """``value`` written out, when it is plain (numbers, text, bytes, None, and tuples,
    lists, sets and dicts of those) and writing it out gives it back."""
    try:
        text = repr(value)
        plain = ast.literal_eval(text) == value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if plain else None


def _laid_out(
    header: list[str], definitions: list[_Definition], wrapper: Sequence[str]
) -> Travelling:
    """The header, then each definition in its file's order, at its own line where the
    lines before leave room (so a traceback's line is the file's), then the wrapper."""
    travelling = Travelling()
    lines = list(header)
    for definition in sorted(definitions, key=lambda d: (d.file, d.line)):
        lines += [""] * max(2, definition.line - 1 - len(lines))
        start = len(lines) + 1
        lines += definition.source.rstrip("\n").split("\n")
        travelling.origins.append((start, len(lines), definition.file, definition.line))
    if wrapper:
        lines += ["", "", *wrapper]
    travelling.source = "\n".join(lines) + "\n"
    return travelling


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
