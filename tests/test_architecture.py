"""The layering of docs/architecture.md, checked mechanically on every import statement.

Every ``import`` in the tree counts, including those under ``TYPE_CHECKING``: a layer that
may not import another may not name its types either.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fluksio"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
SHARED = ("fluksio.errors", "fluksio.names", "fluksio.validation")
"""Top-level modules every engine layer may use: the error root and the vocabulary."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path).split(".")
                base = base[: len(base) - node.level + 1]
                yield node.lineno, ".".join([*base, node.module] if node.module else base)
            else:
                yield node.lineno, node.module or ""


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py")) if folder.exists() else []


def _top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(files: list[Path], allowed: Callable[[str], bool]) -> list[str]:
    found = []
    for path in files:
        for line, name in _imports(path):
            if not allowed(name):
                found.append(f"{path.name}:{line} imports {name}")
    return found


# -- the rules, one predicate each: True when a layer may import the module named ----------

IMPURE = frozenset(
    {"asyncio", "socket", "time", "os", "threading", "subprocess", "select", "random"}
)
"""Standard-library modules that would give the scheduler I/O, a clock, or chance."""


def scheduler_may_import(name: str) -> bool:
    return (_top(name) in STDLIB and _top(name) not in IMPURE) or _within(name, "fluksio.scheduler")


MACHINE_IMPURE = IMPURE | {"secrets", "sqlite3", "logging", "aiohttp", "structlog"}
"""What would give a state machine of the engine's core I/O, a clock, chance or a log."""
PURE_CORE = (
    "fluksio.engine.runs.machine",
    "fluksio.engine.runs.effects",
    "fluksio.engine.runs.reference",
    "fluksio.provisioners.machine",
    "fluksio.provisioners.machine_state",
    "fluksio.provisioners.effects",
    "fluksio.provisioners.requests",
    "fluksio.provisioners.reference",
    "fluksio.provisioners.base",
    "fluksio.engine.runs.models",
    "fluksio.engine.runs.rows",
    "fluksio.engine.runs.states",
    "fluksio.engine.runs.provenance",
    "fluksio.engine.runs.redact",
    "fluksio.engine.models",
    "fluksio.agent.outcome",
)
"""The engine core's state machines and the plain data they speak in."""


def machine_may_import(name: str) -> bool:
    if _within(name, "fluksio"):
        return any(_within(name, p) for p in (*PURE_CORE, "fluksio.scheduler", *SHARED))
    return _top(name) == "pydantic" or (_top(name) in STDLIB and _top(name) not in MACHINE_IMPURE)


def agent_may_import(name: str) -> bool:
    return (
        _top(name) in STDLIB or _top(name) in {"aiohttp", "click"} or _within(name, "fluksio.agent")
    )


def runner_may_import(name: str) -> bool:
    return _top(name) in STDLIB or _within(name, "fluksio.agent.runner")


def provisioners_may_import(name: str) -> bool:
    return (
        _top(name) in STDLIB
        or _top(name) in {"pluggy", "pydantic", "structlog"}
        or any(
            _within(name, prefix)
            for prefix in (
                "fluksio.scheduler",
                "fluksio.provisioners",
                "fluksio.ssh",
                "fluksio.clock",
                *SHARED,
            )
        )
    )


def ssh_may_import(name: str) -> bool:
    return (
        _top(name) in STDLIB
        or _top(name) == "asyncssh"
        or any(_within(name, p) for p in ("fluksio.ssh", "fluksio.clock", "fluksio.errors"))
    )


def outside_ssh_may_import(name: str) -> bool:
    return _top(name) != "asyncssh"


def plugin_may_import(name: str) -> bool:
    # The public API only: the package itself, never its driver, transport or config.
    return not _within(name, "fluksio") or name in {
        "fluksio.provisioners",
        "fluksio.scheduler",
        "fluksio.errors",
    }


UPPER = ("fluksio.engine", "fluksio.api", "fluksio.cli")
"""The engine and what serves and drives it; the layers below know nothing of them."""


def lower_may_import(name: str) -> bool:
    return not any(_within(name, upper) for upper in UPPER)


def engine_may_import(name: str) -> bool:
    return not (_within(name, "fluksio.api") or _within(name, "fluksio.cli"))


def api_may_import(name: str) -> bool:
    return not _within(name, "fluksio.cli")


CLI_ON_A_DATA_DIR = frozenset({"serve", "users", "keys", "provisioners", "options"})
"""The commands that act on an engine's data directory themselves: ``serve`` starts the
engine; ``users add`` and ``keys rotate`` work while it is stopped; ``provisioners check``
reads ``provisioners.json`` and tries the SSH login; ``options`` makes their options from
the engine's setting declarations. Every other command talks to a running engine over
HTTP (``cli/client.py``)."""
CLI_VOCABULARY = (
    "fluksio.engine.datadir",
    "fluksio.engine.runs.provenance",
    "fluksio.engine.runs.states",
    "fluksio.api.answers",
)
"""Plain data any command may read: where an engine keeps its files, the one wording of
where a call ran (the API's ``provenance``, in the words the screen uses), the states,
and the answers' models, which it reads the engine's answers with."""

ANSWER_VOCABULARY = ("fluksio.api.answers", "fluksio.engine.runs.states", "fluksio.scheduler")
"""What the answers' models may name: each other, states, wait kinds and stages."""


def answers_may_import(name: str) -> bool:
    if _within(name, "fluksio"):
        return any(_within(name, prefix) for prefix in ANSWER_VOCABULARY)
    return _top(name) in STDLIB or _top(name) == "pydantic"


def views_reader_may_import(name: str) -> bool:
    """The routes and the live feed read the engine's frozen views (``engine/views.py``),
    never the scheduler's or the provisioners' own types."""
    return not (_within(name, "fluksio.scheduler") or _within(name, "fluksio.provisioners"))


def cli_may_import(name: str) -> bool:
    if any(_within(name, prefix) for prefix in CLI_VOCABULARY):
        return True
    return not (_within(name, "fluksio.engine") or _within(name, "fluksio.api"))


RULES: dict[str, tuple[Callable[[str], bool], str]] = {
    "scheduler": (scheduler_may_import, "import time"),
    "machines": (machine_may_import, "from fluksio.engine.runs.store import RunStore"),
    "machines' chance": (machine_may_import, "import secrets"),
    "agent": (agent_may_import, "from fluksio.api import app"),
    "runner": (runner_may_import, "import aiohttp"),
    "provisioners": (provisioners_may_import, "from fluksio.engine.tokens import TokenService"),
    "ssh": (ssh_may_import, "from fluksio.provisioners.slurm import SlurmProvisioner"),
    "asyncssh outside ssh": (outside_ssh_may_import, "import asyncssh"),
    "plugins": (plugin_may_import, "from fluksio.provisioners.driver import ProvisioningDriver"),
    "below the engine": (lower_may_import, "from fluksio.engine.dispatch import Dispatcher"),
    "engine": (engine_may_import, "from fluksio.api.routes import add_routes"),
    "api": (api_may_import, "from fluksio.cli.client import Client"),
    "cli": (cli_may_import, "from fluksio.engine.tokens import TokenService"),
    "answers": (answers_may_import, "from aiohttp import web"),
    "routes and feed": (views_reader_may_import, "from fluksio.scheduler import PlaceView"),
}


def test_fluksio_is_a_namespace_package() -> None:
    assert not (PACKAGE / "__init__.py").exists(), (
        "fluksio/__init__.py would belong to one distribution and break the other's import"
    )


def test_scheduler_imports_only_pure_parts_of_the_standard_library() -> None:
    files = _files(PACKAGE / "scheduler")
    assert files
    assert _violations(files, scheduler_may_import) == []


def test_the_cores_state_machines_and_their_data_do_no_io_read_no_clock_and_log_nothing() -> None:
    files = [ROOT / (name.replace(".", "/") + ".py") for name in PURE_CORE]
    assert all(path.exists() for path in files)
    assert _violations(files, machine_may_import) == []


def _flat(target: ast.expr) -> list[ast.expr]:
    """Each name a target assigns: ``a.x, b.on_y = ...`` assigns two."""
    if isinstance(target, ast.Tuple | ast.List):
        return [t for each in target.elts for t in _flat(each)]
    return [target]


def _late_listeners(files: list[Path]) -> list[str]:
    """Callbacks hung on another object after it was built (``x.on_change = ...``), or
    observers appended to its lists: the ways of listening the engine's one stream of
    events replaced."""
    found: list[tuple[str, int, str]] = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in [t for each in targets for t in _flat(each)]:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr.startswith("on_")
                    and not (isinstance(target.value, ast.Name) and target.value.id == "self")
                ):
                    found.append((path.name, target.lineno, f"sets .{target.attr}"))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "append"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr.endswith("observers")
            ):
                found.append((path.name, node.lineno, f"appends to .{node.func.value.attr}"))
    return [f"{name}:{line} {what}" for name, line, what in sorted(found)]


def test_nothing_is_told_what_to_report_to_after_it_was_built() -> None:
    """The engine listens through its one stream; provisioners are given what they report
    to when they are started, shells when they are opened; the agent likewise."""
    folders = ("engine", "api", "provisioners", "ssh", "agent")
    files = [path for folder in folders for path in _files(PACKAGE / folder)]
    plugins = [path for plugin in (ROOT / "plugins").iterdir() for path in _files(plugin)]
    assert _late_listeners([*files, *plugins]) == []


def test_the_listener_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "registry.on_session_change = feed.changed\nruns.observers.append(f)\n"
        "session.away, session.on_gone = True, farewell\n"
    )
    assert _late_listeners([probe]) == [
        "probe.py:1 sets .on_session_change",
        "probe.py:2 appends to .observers",
        "probe.py:3 sets .on_gone",
    ]


CLOCK_READINGS = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "datetime.now",
        "datetime.utcnow",
        "date.today",
        "asyncio.sleep",
        "asyncio.wait_for",
        "asyncio.timeout",
    }
)
"""Reading the time or waiting for it, other than through the engine's one clock."""
LOOP_TIMERS = frozenset({"call_later", "call_at", "time"})
"""An event loop's own timers and reading (``loop.call_later``), the clock's to use."""


def _clock_readings(files: list[Path]) -> list[str]:
    found: list[tuple[str, int, str]] = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == "time":
                found.append((path.name, node.lineno, "imports from time"))
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and f"{node.value.id}.{node.attr}" in CLOCK_READINGS
            ):
                found.append((path.name, node.lineno, f"uses {node.value.id}.{node.attr}"))
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner, attr = node.func.value, node.func.attr
            loop = (isinstance(owner, ast.Name) and owner.id == "loop") or (
                isinstance(owner, ast.Call)
                and isinstance(owner.func, ast.Attribute)
                and owner.func.attr in {"get_running_loop", "get_event_loop"}
            )
            if loop and attr in LOOP_TIMERS:
                found.append((path.name, node.lineno, f"calls the event loop's {attr}"))
    return [f"{name}:{line} {what}" for name, line, what in sorted(found)]


ENGINE = [
    p
    for folder in ("engine", "api", "provisioners", "ssh")
    for p in _files(PACKAGE / folder)
    if p.name != "relay_program.py"
]
"""The engine's code: everything but the agent (a program of its own), the command line
(a client) and the clock; and not the relay, a program sent as text to a login node."""


def test_the_engine_reads_time_only_through_its_one_clock() -> None:
    assert ENGINE
    assert _clock_readings(ENGINE) == []


def test_the_clock_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from time import monotonic\n"
        "started = time.perf_counter()\n"
        "await asyncio.sleep(1)\n"
        "asyncio.get_running_loop().call_later(1, f)\n"
        "loop.call_at(5, f)\n"
        "self._clock.call_later(1, f)\n"
        "stamp = datetime.now(tz=UTC)\n"
        "clock: Callable[[], float] = time.monotonic\n"
    )
    assert _clock_readings([probe]) == [
        "probe.py:1 imports from time",
        "probe.py:2 uses time.perf_counter",
        "probe.py:3 uses asyncio.sleep",
        "probe.py:4 calls the event loop's call_later",
        "probe.py:5 calls the event loop's call_at",
        "probe.py:7 uses datetime.now",
        "probe.py:8 uses time.monotonic",
    ]


def test_agent_imports_nothing_of_the_engine() -> None:
    assert _violations(_files(PACKAGE / "agent"), agent_may_import) == []


def test_runner_imports_only_the_standard_library() -> None:
    runners = [
        p for p in _files(PACKAGE / "agent") if p.stem.startswith("runner") or "runner" in p.parts
    ]
    assert _violations(runners, runner_may_import) == []


def test_error_root_and_vocabulary_import_only_the_standard_library_and_pydantic() -> None:
    assert _violations([PACKAGE / "errors.py"], lambda name: _top(name) in STDLIB) == []
    assert _violations([PACKAGE / "clock.py"], lambda name: _top(name) in STDLIB) == []
    vocabulary = [PACKAGE / "names.py", PACKAGE / "validation.py"]
    assert (
        _violations(
            vocabulary,
            lambda name: _top(name) in STDLIB or _top(name) == "pydantic" or name in SHARED,
        )
        == []
    )


def test_provisioners_import_scheduler_types_and_their_own_libraries_only() -> None:
    assert _violations(_files(PACKAGE / "provisioners"), provisioners_may_import) == []


def test_ssh_is_one_package_that_knows_nothing_of_its_users() -> None:
    assert _violations(_files(PACKAGE / "ssh"), ssh_may_import) == []


_RUNNERS = frozenset({"create_subprocess_exec", "run", "Popen", "call", "check_output", "execvp"})


def _runs_ssh(files: list[Path]) -> list[str]:
    """Processes started as ``ssh`` (its name as the program, or first in an argv list)."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            first = node.args[0]
            if isinstance(first, ast.List | ast.Tuple) and first.elts:
                first = first.elts[0]
            if name in _RUNNERS and isinstance(first, ast.Constant) and first.value == "ssh":
                found.append(f"{path.name}:{node.lineno} runs ssh")
    return sorted(found)


def test_only_the_ssh_package_imports_asyncssh_or_runs_ssh() -> None:
    outside = [p for p in _files(PACKAGE) if "ssh" not in p.relative_to(PACKAGE).parts[:1]]
    assert _violations(outside, outside_ssh_may_import) == []
    assert _runs_ssh(outside) == []


def test_the_ssh_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "await asyncio.create_subprocess_exec('ssh', host)\n"
        "subprocess.run(['ssh', '-T', host])\n"
        "subprocess.run(['scp', host])\n"
    )
    assert _runs_ssh([probe]) == ["probe.py:1 runs ssh", "probe.py:2 runs ssh"]


def test_nothing_below_the_engine_imports_it_or_what_serves_it() -> None:
    below = [p for p in _files(PACKAGE) if not any(_within(_module_name(p), u) for u in UPPER)]
    assert below
    assert _violations(below, lower_may_import) == []


def test_the_engine_imports_neither_the_http_api_nor_the_command_line() -> None:
    assert _violations(_files(PACKAGE / "engine"), engine_may_import) == []
    assert _violations(_files(PACKAGE / "api"), api_may_import) == []


def test_routes_and_the_live_feed_read_views_not_the_cores_types() -> None:
    readers = [*_files(PACKAGE / "api" / "routes"), PACKAGE / "api" / "live.py"]
    assert _violations(readers, views_reader_may_import) == []


def test_the_answers_models_are_plain_data_a_client_can_import() -> None:
    """The command line reads answers through them: they bring no server along."""
    assert _violations(_files(PACKAGE / "api" / "answers"), answers_may_import) == []


def test_the_command_line_talks_to_the_engine_over_http() -> None:
    clients = [p for p in _files(PACKAGE / "cli") if p.stem not in CLI_ON_A_DATA_DIR]
    assert clients
    assert _violations(clients, cli_may_import) == []


def test_plugins_use_the_public_provisioner_api_only() -> None:
    assert _files(ROOT / "plugins")
    assert _violations(_files(ROOT / "plugins"), plugin_may_import) == []


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_can_fail(rule: str, tmp_path: Path) -> None:
    """Guard against a rule that passes everything: feed it an import it forbids."""
    allowed, forbidden = RULES[rule]
    probe = tmp_path / "probe.py"
    probe.write_text(f"import json\n{forbidden}\n")
    assert _violations([probe], allowed) == [f"probe.py:2 imports {forbidden.split()[1]}"]


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """Guard against a checker that passes everything: feed it forbidden imports."""
    probe = tmp_path / "probe.py"
    probe.write_text("import aiohttp\nfrom fluksio.api import app\nimport json\n")
    found = _violations([probe], lambda name: _top(name) in STDLIB)
    assert found == ["probe.py:1 imports aiohttp", "probe.py:2 imports fluksio.api"]


MAX_MODULE_LINES = 500


def _too_long(files: list[Path]) -> list[str]:
    found = []
    for path in files:
        lines = len(path.read_text().splitlines())
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        if lines > MAX_MODULE_LINES:
            found.append(f"{name} has {lines} lines")
    return found


def test_no_module_is_over_500_lines() -> None:
    assert _too_long(_files(PACKAGE)) == []


def test_the_length_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _too_long([probe]) == [f"probe.py has {MAX_MODULE_LINES + 1} lines"]


def _misplaced_docstrings(files: list[Path]) -> list[str]:
    """A string statement that documents nothing: a second one after an attribute (the
    first documents it; the second was meant for another)."""
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            body = getattr(node, "body", None)
            if not isinstance(body, list):
                continue
            for first, second, third in zip(body, body[1:], body[2:], strict=False):
                if (
                    isinstance(first, ast.Assign | ast.AnnAssign)
                    and _is_string(second)
                    and _is_string(third)
                ):
                    found.append(f"{path.name}:{third.lineno} documents nothing")
    return found


def _is_string(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def test_every_attribute_docstring_follows_its_attribute() -> None:
    assert _misplaced_docstrings(_files(PACKAGE)) == []


def test_the_docstring_rule_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('A = 1\n"""About A."""\nB = 2\n"""About B."""\n"""About C."""\n')
    assert _misplaced_docstrings([probe]) == ["probe.py:5 documents nothing"]
