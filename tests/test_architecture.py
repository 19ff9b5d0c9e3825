"""The layering of docs/architecture.md, checked mechanically on every import statement.

Every ``import`` in the tree counts, including those under ``TYPE_CHECKING``: a layer that
may not import another may not name its types either.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.code import (
    PACKAGE,
    ROOT,
    STDLIB,
    files_under,
    module_name,
    top,
    violations,
    within,
)

SHARED = ("fluksio.errors", "fluksio.names", "fluksio.validation", "fluksio.logs")
"""Top-level modules every engine layer may use: the error root, the vocabulary and the
log (one pipeline, which blanks secrets, whoever writes the line)."""


IMPURE = frozenset(
    {"asyncio", "socket", "time", "os", "threading", "subprocess", "select", "random"}
)
"""Standard-library modules that would give the scheduler I/O, a clock, or chance."""


def scheduler_may_import(name: str) -> bool:
    return (top(name) in STDLIB and top(name) not in IMPURE) or within(name, "fluksio.scheduler")


MACHINE_IMPURE = IMPURE | {"secrets", "sqlite3", "logging", "aiohttp", "structlog"}
"""What would give a state machine of the engine's core I/O, a clock, chance or a log."""
PURE_FOLDERS = (
    "fluksio.scheduler",
    "fluksio.wire",
    "fluksio.engine.runs.machine",
    "fluksio.engine.workers.connection",
    "fluksio.provisioners.machine",
    "fluksio.agent.protocol",
    "fluksio.agent.machine",
)
"""The state machines, their references and the plain data they speak in: everything
under each of these folders is pure (a module added there is held to it by being there)."""
PLUGIN_DATA = "fluksio.provisioners.base"
"""The provisioner API's plain data (job states, a worker's record, site limits), which
the provisioning machine speaks in and plugins import: pure too, beside its package."""


def machine_may_import(name: str) -> bool:
    if within(name, "fluksio"):
        return any(within(name, p) for p in (*PURE_FOLDERS, PLUGIN_DATA, *SHARED))
    return top(name) == "pydantic" or (top(name) in STDLIB and top(name) not in MACHINE_IMPURE)


def agent_may_import(name: str) -> bool:
    return top(name) in STDLIB or top(name) in {"aiohttp", "click"} or within(name, "fluksio.agent")


def runner_may_import(name: str) -> bool:
    return top(name) in STDLIB or within(name, "fluksio.agent.runner")


def provisioners_may_import(name: str) -> bool:
    return (
        top(name) in STDLIB
        or top(name) in {"pluggy", "pydantic", "structlog"}
        or any(
            within(name, prefix)
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
        top(name) in STDLIB
        or top(name) == "asyncssh"
        or any(within(name, p) for p in ("fluksio.ssh", "fluksio.clock", "fluksio.errors"))
    )


def outside_ssh_may_import(name: str) -> bool:
    return top(name) != "asyncssh"


def plugin_may_import(name: str) -> bool:
    # The public API only: the package itself (and, for a plugin's own tests, its scripted
    # shell), never its driver, transport or config.
    return not within(name, "fluksio") or name in {
        "fluksio.provisioners",
        "fluksio.provisioners.testing",
        "fluksio.scheduler",
        "fluksio.errors",
    }


UPPER = ("fluksio.engine", "fluksio.api", "fluksio.cli", "fluksio.client")
"""The engine and what serves and drives it; the layers below know nothing of them."""


def lower_may_import(name: str) -> bool:
    return not any(within(name, upper) for upper in UPPER)


def engine_may_import(name: str) -> bool:
    # The runner is the agent's: the engine says what a call is in its run frame, and the
    # launcher tells the runner; no runner name (an environment variable) is the engine's.
    return not (
        within(name, "fluksio.api")
        or within(name, "fluksio.cli")
        or within(name, "fluksio.agent.runner")
    )


def api_may_import(name: str) -> bool:
    return not within(name, "fluksio.cli")


CLI_LOCAL = PACKAGE / "cli" / "local"
"""The commands that act on an engine's data directory themselves (``serve``, ``users``,
``keys``, ``provisioners``, ``options``): a folder of their own. Every other command talks
to a running engine over HTTP (``cli/client.py``)."""
CLI_VOCABULARY = ("fluksio.engine.datadir", "fluksio.wire")
"""Plain data any command may read: where an engine keeps its files, and the wire's
vocabulary (what it sends, the answers it reads, the states, where a call ran)."""


def wire_may_import(name: str) -> bool:
    """The wire's vocabulary: the standard library, pydantic, itself and the name rule."""
    if within(name, "fluksio"):
        return within(name, "fluksio.wire") or within(name, "fluksio.names")
    return top(name) in STDLIB or top(name) == "pydantic"


def views_reader_may_import(name: str) -> bool:
    """The routes and the live feed read the answers the engine builds (``engine/views.py``),
    never the scheduler's or the provisioners' own types."""
    return not (within(name, "fluksio.scheduler") or within(name, "fluksio.provisioners"))


CLIENT_VOCABULARY = ("fluksio.client", "fluksio.wire")
"""What the Python client may name of the tree: itself and the wire's vocabulary (the
models it sends and reads the engine's answers with); everything else is over HTTP."""
CLIENT_LIBRARIES = ("pydantic", "aiohttp")
"""The answers' models, and the async client's HTTP."""


def client_may_import(name: str) -> bool:
    if within(name, "fluksio"):
        return any(within(name, p) for p in (*CLIENT_VOCABULARY, *SHARED))
    return top(name) in STDLIB or top(name) in CLIENT_LIBRARIES


def cli_may_import(name: str) -> bool:
    if any(within(name, prefix) for prefix in CLI_VOCABULARY):
        return True
    return not (within(name, "fluksio.engine") or within(name, "fluksio.api"))


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
    "below the engine": (
        lower_may_import,
        "from fluksio.engine.dispatch.dispatcher import Dispatcher",
    ),
    "engine": (engine_may_import, "from fluksio.api.routes import add_routes"),
    "engine and runner": (engine_may_import, "from fluksio.agent.runner import RESTORED_ENV"),
    "api": (api_may_import, "from fluksio.cli.client import Client"),
    "cli": (cli_may_import, "from fluksio.engine.tokens import TokenService"),
    "client": (client_may_import, "from fluksio.engine.datadir import DataDir"),
    "wire": (wire_may_import, "from fluksio.scheduler import WaitKind"),
    "routes and feed": (views_reader_may_import, "from fluksio.scheduler import PlaceView"),
}


def test_fluksio_is_a_namespace_package() -> None:
    assert not (PACKAGE / "__init__.py").exists(), (
        "fluksio/__init__.py would belong to one distribution and break the other's import"
    )


def test_scheduler_imports_only_pure_parts_of_the_standard_library() -> None:
    files = files_under(PACKAGE / "scheduler")
    assert files
    assert violations(files, scheduler_may_import) == []


def test_the_cores_state_machines_and_their_data_do_no_io_read_no_clock_and_log_nothing() -> None:
    folders = [ROOT / name.replace(".", "/") for name in PURE_FOLDERS]
    files = [path for folder in folders for path in files_under(folder)]
    files.append(ROOT / (PLUGIN_DATA.replace(".", "/") + ".py"))
    assert all(folder.is_dir() for folder in folders) and len(files) > len(folders)
    assert violations(files, machine_may_import) == []


def test_agent_imports_nothing_of_the_engine() -> None:
    assert violations(files_under(PACKAGE / "agent"), agent_may_import) == []


def test_runner_imports_only_the_standard_library() -> None:
    runners = [
        p
        for p in files_under(PACKAGE / "agent")
        if p.stem.startswith("runner") or "runner" in p.parts
    ]
    assert violations(runners, runner_may_import) == []


def test_error_root_and_vocabulary_import_only_the_standard_library_and_pydantic() -> None:
    assert violations([PACKAGE / "errors.py"], lambda name: top(name) in STDLIB) == []
    # The clock is declared in the agent (installed alone, it runs on it too), and is
    # standard library only there; fluksio/clock.py only names it for the engine.
    clocks = [PACKAGE / "clock.py", PACKAGE / "agent" / "clock.py"]
    in_the_agent = "fluksio.agent.clock"
    assert violations(clocks, lambda name: top(name) in STDLIB or name == in_the_agent) == []
    vocabulary = [PACKAGE / "names.py", PACKAGE / "validation.py"]
    assert (
        violations(
            vocabulary,
            lambda name: top(name) in STDLIB or top(name) == "pydantic" or name in SHARED,
        )
        == []
    )


def test_provisioners_import_scheduler_types_and_their_own_libraries_only() -> None:
    assert violations(files_under(PACKAGE / "provisioners"), provisioners_may_import) == []


def test_ssh_is_one_package_that_knows_nothing_of_its_users() -> None:
    assert violations(files_under(PACKAGE / "ssh"), ssh_may_import) == []


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
    outside = [p for p in files_under(PACKAGE) if "ssh" not in p.relative_to(PACKAGE).parts[:1]]
    assert violations(outside, outside_ssh_may_import) == []
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
    below = [p for p in files_under(PACKAGE) if not any(within(module_name(p), u) for u in UPPER)]
    assert below
    assert violations(below, lower_may_import) == []


def test_the_engine_imports_neither_the_http_api_nor_the_command_line() -> None:
    assert violations(files_under(PACKAGE / "engine"), engine_may_import) == []
    assert violations(files_under(PACKAGE / "api"), api_may_import) == []


def test_routes_and_the_live_feed_read_views_not_the_cores_types() -> None:
    readers = [*files_under(PACKAGE / "api" / "routes"), PACKAGE / "engine" / "live.py"]
    assert violations(readers, views_reader_may_import) == []


def test_the_wire_is_plain_data_a_client_can_import() -> None:
    """Clients send and read through it: it brings no server and no engine along."""
    files = files_under(PACKAGE / "wire")
    assert len(files) > 8
    assert violations(files, wire_may_import) == []


def test_the_command_line_talks_to_the_engine_over_http() -> None:
    clients = [p for p in files_under(PACKAGE / "cli") if CLI_LOCAL not in p.parents]
    assert clients
    assert violations(clients, cli_may_import) == []


def test_the_python_client_talks_to_the_engine_over_http_only() -> None:
    """A script needs the answers' models and nothing of the server (no aiohttp, no
    engine stores): ``fluksio.client`` reads the engine's answers and nothing else, but
    for ``embedded.py`` (``local()``), which starts an engine in the script's process
    (and is loaded only when ``local`` is asked for)."""
    over_http = [p for p in files_under(PACKAGE / "client") if p.name != "embedded.py"]
    assert len(over_http) >= 3
    assert violations(over_http, client_may_import) == []


def test_plugins_use_the_public_provisioner_api_only() -> None:
    assert files_under(ROOT / "plugins")
    assert violations(files_under(ROOT / "plugins"), plugin_may_import) == []


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_can_fail(rule: str, tmp_path: Path) -> None:
    """Guard against a rule that passes everything: feed it an import it forbids."""
    allowed, forbidden = RULES[rule]
    probe = tmp_path / "probe.py"
    probe.write_text(f"import json\n{forbidden}\n")
    assert violations([probe], allowed) == [f"probe.py:2 imports {forbidden.split()[1]}"]


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """Guard against a checker that passes everything: feed it forbidden imports."""
    probe = tmp_path / "probe.py"
    probe.write_text("import aiohttp\nfrom fluksio.api import app\nimport json\n")
    found = violations([probe], lambda name: top(name) in STDLIB)
    assert found == ["probe.py:1 imports aiohttp", "probe.py:2 imports fluksio.api"]
