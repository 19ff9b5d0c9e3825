"""One call in its process: the node's code loaded, its function called, one result
record written."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from fluksio.agent.runner.processes import die_with_parent
from fluksio.agent.runner.protocol import RECORD_FD, SPEC_FD, Records, encode_record
from fluksio.agent.runner.reporter import Checkpointed, reporter_module

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import types
    from collections.abc import Callable
    from typing import Any


def _pick_function(module: types.ModuleType, node: str) -> Callable[..., object]:
    import types

    candidate: Any = getattr(module, "process", None)
    if callable(candidate):
        return candidate  # type: ignore[no-any-return]
    public = [
        value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, types.FunctionType)
        and value.__module__ == module.__name__
    ]
    if len(public) == 1:
        return public[0]
    if not public:
        raise LookupError(f"node {node!r} defines no process() and no public function")
    names = ", ".join(sorted(f.__name__ for f in public))
    raise LookupError(f"node {node!r} has no process() and several public functions: {names}")


def source_name(node: str) -> str:
    """The file name a node's code has in its tracebacks and errors: ``<node train>``.

    No "/" in it: a SyntaxError names its file by what follows the last "/" there."""
    return f"<node {node}>"


def _load(spec: dict[str, Any]) -> Callable[..., object]:
    import linecache
    import types

    node = spec.get("node", "node")
    filename = source_name(node)
    source = spec["source"]
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    module = types.ModuleType("fluksio_node")
    module.__file__ = filename
    sys.modules["fluksio_node"] = module
    exec(code, module.__dict__)  # running node code is this module's job
    return _pick_function(module, node)


def _error(exc: BaseException) -> dict[str, str]:
    import traceback

    here = os.path.abspath(__file__)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(frame.filename) != here
    ]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    message = str(exc)
    short = f"{type(exc).__name__}: {message}".splitlines()[0] if message else type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": message,
        "short": short[:300],
        "traceback": "".join(lines),
    }


def _call(function: Callable[..., object], kwargs: dict[str, Any], records: Records) -> object:
    import types

    result = function(**_accepted(function, kwargs))
    if isinstance(result, types.GeneratorType):
        last = None
        while True:
            try:
                last = next(result)
            except StopIteration as stop:
                return stop.value if stop.value is not None else last
            records.write({"kind": "event", "event": "yield", "outputs": last, "ts": time.time()})
    return result


def _accepted(function: Callable[..., object], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``function`` takes by keyword, read off its code object.

    The engine selects them from the source already, unless its Python cannot parse that
    source (a worker's may be newer): then it sends every name it could, and this picks.
    """
    code = getattr(function, "__code__", None)
    var_keyword = 0x08  # CO_VARKEYWORDS: it takes **kwargs
    if code is None or code.co_flags & var_keyword:
        return kwargs
    first = getattr(code, "co_posonlyargcount", 0)
    names = code.co_varnames[first : code.co_argcount + code.co_kwonlyargcount]
    return {name: value for name, value in kwargs.items() if name in names}


def run_child(
    parent_pid: int = 0,
    record_fd: int = RECORD_FD,
    spec_bytes: bytes | None = None,
    death_signal: int = signal.SIGKILL,
) -> int:
    """The body of a call process: read the spec, run, write exactly one result record.

    The environment has been filtered already (by ``main`` for a spawned call, once by
    the fork server for its children); here only the call's own variables are added.
    """
    die_with_parent(parent_pid, death_signal)
    if spec_bytes is None:
        with os.fdopen(SPEC_FD, "rb", closefd=False) as handle:
            spec_bytes = handle.read()
    return run_spec(spec_bytes, record_fd)


def _noticed(_signum: int, _frame: object) -> None:
    """A notice the node does not handle: nothing happens."""


def run_spec(spec_bytes: bytes, record_fd: int) -> int:
    os.set_inheritable(record_fd, False)  # the node's own subprocesses never get it
    records = Records(record_fd)
    spec = json.loads(spec_bytes)
    os.environ.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    notice = os.environ.get("FLUKSIO_NOTICE_SIGNAL")
    if notice in ("SIGUSR1", "SIGUSR2"):
        # Their default would end the process: a node that does not handle its notice
        # runs on until it is stopped, as if it had none.
        signal.signal(getattr(signal, notice), _noticed)
    sys.modules["fluksio"] = reporter_module(records, spec.get("restored"))
    try:
        function = _load(spec)
        if spec.get("op") == "compile":
            outcome = {"kind": "result", "ok": True, "result": {"function": function.__name__}}
        else:
            value = _call(function, spec.get("kwargs") or {}, records)
            outcome = {"kind": "result", "ok": True, "result": value}
    except Checkpointed as saved:
        said = "it saved its state (fluksio.checkpoint) and ended"
        error = {"type": "Checkpointed", "message": said, "short": f"Checkpointed: {said}"}
        error["traceback"] = ""
        outcome = {"kind": "result", "ok": False, "error": error, "checkpoint": saved.ref}
    except BaseException as exc:  # everything the node raises is its result
        outcome = {"kind": "result", "ok": False, "error": _error(exc)}
    try:
        payload = encode_record(outcome)
    except (TypeError, ValueError) as exc:
        refused = type(exc)(f"the node's result is not JSON: {exc}")
        payload = encode_record({"kind": "result", "ok": False, "error": _error(refused)})
    sys.stdout.flush()
    sys.stderr.flush()
    records.write_encoded(payload)
    return 0
