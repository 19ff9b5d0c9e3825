"""The runner and launcher with real processes: what a node sees, reports and leaves behind.

Each behaviour is checked in both process modes (fork server and spawn), since a worker
falls back to spawning and both must look the same to node code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fluksio.agent.launcher import Launcher, LauncherError
from fluksio.agent.onefile import runner_path, runner_source
from fluksio.agent.protocol.frames import LogFrame, ProgressFrame, RunFrame
from tests.support.launching import launcher, node, run
from tests.support.process import alive
from tests.support.wait import async_wait_for

pytestmark = pytest.mark.process
__all__ = ["launcher"]  # the fixture, used by name

PYENV = Path.home() / ".pyenv" / "versions"


async def test_result_events_and_logs(launcher: Launcher) -> None:
    outcome, events = await run(
        launcher,
        """
        import fluksio
        def process(x, y=2):
            print("working on", x)
            fluksio.emit(progress=0.5)
            return {"sum": x + y}
    """,
        kwargs={"x": 40},
    )
    assert outcome.ok and outcome.result == {"sum": 42}
    assert outcome.logs == "working on 40\n"
    emitted = [(e.event, e.outputs) for e in events if isinstance(e, ProgressFrame)]
    assert emitted == [("emit", {"progress": 0.5})]
    # The same line came while it ran, numbered from 0.
    assert [(e.first, e.lines) for e in events if isinstance(e, LogFrame)] == [
        (0, ["working on 40"])
    ]


async def test_the_only_public_function_is_called_and_generators_yield(launcher: Launcher) -> None:
    outcome, events = await run(
        launcher,
        """
        def _helper():
            return 1
        def count(n):
            for i in range(n):
                yield i + _helper()
    """,
        kwargs={"n": 3},
    )
    assert outcome.ok and outcome.result == 3, "the last yield is the result"
    assert [e.outputs for e in events if isinstance(e, ProgressFrame) and e.event == "yield"] == [
        1,
        2,
        3,
    ]


async def test_an_exception_returns_its_traceback(launcher: Launcher) -> None:
    outcome, _ = await run(
        launcher,
        """
        def process():
            return inner()
        def inner():
            raise ValueError("the input was empty")
    """,
    )
    assert not outcome.ok
    assert outcome.error["type"] == "ValueError"
    assert outcome.error["short"] == "ValueError: the input was empty"
    trace = outcome.error["traceback"]
    assert "line 4, in inner" in trace and 'raise ValueError("the input was empty")' in trace
    assert runner_path().name not in trace, "the runner's own frames are not the user's business"


async def test_a_result_that_is_not_json_names_the_type(launcher: Launcher) -> None:
    outcome, _ = await run(launcher, "def process():\n    return {'when': object()}\n")
    assert not outcome.ok and "not JSON" in outcome.error["message"]
    assert "object" in outcome.error["message"]
    nan, _ = await run(launcher, "def process():\n    return float('nan')\n", call_id="c2")
    assert not nan.ok and "not JSON" in nan.error["message"]


async def test_thread_caps_devices_and_a_filtered_environment(launcher: Launcher) -> None:
    outcome, _ = await run(
        launcher,
        """
        import os
        def process():
            return {k: os.environ.get(k) for k in (
                "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MY_API_TOKEN",
                "AWS_SECRET_ACCESS_KEY", "FLUKSIO_WORKER_TOKEN", "HARMLESS_SETTING",
                "DATABASE_URL", "X_CONNECTION_STRING", "PGPASSFILE", "HTTP_PROXY",
                "https_proxy", "NO_PROXY", "DOCS_URL")}
    """,
        env={"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "CUDA_VISIBLE_DEVICES": "1,2"},
    )
    assert outcome.result == {
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "CUDA_VISIBLE_DEVICES": "1,2",
        "MY_API_TOKEN": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "FLUKSIO_WORKER_TOKEN": None,
        "HARMLESS_SETTING": "visible",
        # Removed by name:
        "DATABASE_URL": None,
        "X_CONNECTION_STRING": None,
        "PGPASSFILE": None,
        # Kept, without the credentials in their URLs:
        "HTTP_PROXY": "http://proxy.example:3128",
        "https_proxy": "http://proxy.example:3128",
        "NO_PROXY": "localhost,127.0.0.1",
        "DOCS_URL": "https://docs.example/guide",
    }


async def test_import_fluksio_is_the_reporter_even_with_a_decoy_on_the_path(
    launcher: Launcher, tmp_path: Path
) -> None:
    decoy = tmp_path / "fluksio"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("DECOY = True\ndef emit(**k):\n    raise SystemExit(9)\n")
    outcome, events = await run(
        launcher,
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import fluksio
        def process():
            fluksio.emit(step=1)
            fluksio.logger.info("logged")
            return [hasattr(fluksio, "DECOY"), sorted(fluksio.__all__)]
    """,
    )
    reporter = [
        "checkpoint",
        "emit",
        "load_artifact",
        "logger",
        "restored",
        "save_artifact",
        "time_left",
    ]
    assert outcome.result == [False, reporter]
    assert [e.outputs for e in events if isinstance(e, ProgressFrame)] == [{"step": 1}]
    assert "INFO logged" in outcome.logs


async def test_a_flood_of_output_is_bounded(launcher: Launcher) -> None:
    outcome, _ = await run(
        launcher,
        """
        import sys
        def process():
            line = "x" * 1023 + "\\n"
            for _ in range(100 * 1024):
                sys.stdout.write(line)
            return "done"
    """,
    )
    assert outcome.ok and outcome.result == "done"
    assert len(outcome.logs) < 1_100_000
    assert "bytes of output dropped" in outcome.logs


async def test_cancel_kills_the_process_and_not_another_call(launcher: Launcher) -> None:
    sleeper = "import time\ndef process():\n    time.sleep(60)\n    return 'slept'\n"
    first = asyncio.create_task(
        launcher.run(RunFrame(call_id="one", source=sleeper, node="n", flow="f"))
    )
    second = asyncio.create_task(
        launcher.run(RunFrame(call_id="two", source=sleeper, node="n", flow="f"))
    )
    pid = await _pid_when_started(launcher, "one")
    await _pid_when_started(launcher, "two")
    assert launcher.cancel("one")
    outcome = await asyncio.wait_for(first, 10)
    assert outcome.error is not None and outcome.error["type"] == "NodeCancelled"
    await _gone(pid)
    assert not second.done(), "the other call goes on"
    launcher.cancel("two")
    await asyncio.wait_for(second, 10)


async def test_a_cancel_that_comes_before_its_call_or_while_it_starts_is_kept(
    launcher: Launcher,
) -> None:
    # The engine hands a call to its launcher on a task of its own: a cancel may come
    # before that task has begun, or while its process is being forked.
    sleeper = "import time\ndef process():\n    time.sleep(60)\n    return 'slept'\n"
    assert not launcher.cancel("early")
    early = await asyncio.wait_for(
        launcher.run(RunFrame(call_id="early", source=sleeper, node="n", flow="f")), 10
    )
    assert early.error is not None and early.error["type"] == "NodeCancelled"
    starting = asyncio.create_task(
        launcher.run(RunFrame(call_id="starting", source=sleeper, node="n", flow="f"))
    )
    await asyncio.sleep(0)  # its run has begun; its process is being started
    assert launcher.cancel("starting")
    outcome = await asyncio.wait_for(starting, 10)
    assert outcome.error is not None and outcome.error["type"] == "NodeCancelled"


async def _pid_when_started(launcher: Launcher, call_id: str) -> int:
    return await async_wait_for(
        lambda: launcher.pid_of(call_id), timeout=5, what=f"{call_id} to start"
    )


async def _gone(pid: int) -> None:
    await async_wait_for(lambda: not alive(pid), timeout=5, what=f"process {pid} to end")


async def test_cancel_kills_what_the_node_started_too(launcher: Launcher, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    source = node(f"""
        import subprocess, time
        def process():
            child = subprocess.Popen(["sleep", "60"])
            open({str(pid_file)!r}, "w").write(str(child.pid))
            time.sleep(60)
    """)
    task = asyncio.create_task(
        launcher.run(RunFrame(call_id="tree", source=source, node="n", flow="f"))
    )
    await async_wait_for(
        lambda: pid_file.exists() and pid_file.read_text(),
        timeout=10,
        what="the node to start its child",
    )
    grandchild = int(pid_file.read_text())
    launcher.cancel("tree")
    await asyncio.wait_for(task, 10)
    await _gone(grandchild)


async def test_silence_timeout_counts_output_and_events_but_stops_a_quiet_node(
    launcher: Launcher,
) -> None:
    chatty = """
        import time, fluksio
        def process():
            for i in range(6):
                time.sleep(0.25)
                print("still here", flush=True) if i % 2 else fluksio.emit(i=i)
            return "finished"
    """
    outcome, _ = await run(launcher, chatty, timeout=1.0)
    assert outcome.ok and outcome.result == "finished"
    quiet = "import time\ndef process():\n    time.sleep(30)\n"
    outcome, _ = await run(launcher, quiet, timeout=0.5, call_id="quiet")
    assert outcome.error["type"] == "NodeTimeout"
    assert "0.5 s" in outcome.error["message"]


async def test_a_process_that_dies_says_how(launcher: Launcher) -> None:
    outcome, _ = await run(
        launcher, "import os, signal\ndef process():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert outcome.error["type"] == "RemoteError"
    assert "SIGKILL" in outcome.error["message"]
    exited, _ = await run(launcher, "import os\ndef process():\n    os._exit(3)\n", call_id="c2")
    assert "status 3" in exited.error["message"]


async def test_each_call_is_a_fresh_process_that_no_earlier_call_touched(
    launcher: Launcher,
) -> None:
    meddler = """
        import json, os, sys
        def process():
            json.left_by_an_earlier_call = True
            os.environ["LEFT_BY_AN_EARLIER_CALL"] = "1"
            sys.path.append("/left/by/an/earlier/call")
            return os.getpid()
    """
    inspector = """
        import json, linecache, os, sys
        def process():
            return {
                "pid": os.getpid(),
                "module attribute": hasattr(json, "left_by_an_earlier_call"),
                "variable": sorted(k for k in os.environ if "EARLIER" in k or "REHEARSAL" in k),
                "path": [p for p in sys.path if "earlier" in p],
                "sources": [name for name in linecache.cache if name.startswith("<node")],
                "module": sys.modules["fluksio_node"].__file__,
            }
    """
    pids = set()
    for index in range(4):  # in fork mode, more calls than the server keeps forked ahead
        meddled, _ = await run(launcher, meddler, call_id=f"meddler-{index}")
        inspected, _ = await run(launcher, inspector, call_id=f"inspector-{index}")
        assert meddled.ok and inspected.ok, (meddled.error, inspected.error)
        seen = inspected.result
        pids |= {meddled.result, seen.pop("pid")}
        assert seen == {
            "module attribute": False,
            "variable": [],
            "path": [],
            "sources": ["<node n>"],
            "module": "<node n>",
        }
    assert len(pids) == 8, "every call had a process of its own"


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2 :].split()[1]) == parent:
                found.append(int(entry))
    return found


async def test_calls_still_run_after_the_processes_forked_ahead_were_killed() -> None:
    launched = Launcher(mode="fork")
    await launched.start()
    try:
        first, _ = await run(launched, "def process():\n    return 1\n", call_id="first")
        assert first.ok
        (server,) = [
            pid
            for pid in _children_of(os.getpid())
            if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        waiting = _children_of(server)
        assert waiting, "the fork server keeps call processes forked ahead of need"
        for pid in waiting:
            # One may already have ended (the first call's, reaped as it was listed).
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await async_wait_for(
            lambda: not any(alive(pid) for pid in waiting), timeout=10, what="them to die"
        )
        for index in range(5):
            outcome, _ = await run(
                launched, "import os\ndef process():\n    return os.getpid()\n", call_id=f"c{index}"
            )
            assert outcome.ok, outcome.error
            assert outcome.result not in waiting
    finally:
        await launched.close()


async def test_compile_loads_the_module_without_calling_it(launcher: Launcher) -> None:
    outcome, _ = await run(
        launcher, "import json\ndef process():\n    raise SystemExit(1)\n", op="compile"
    )
    assert outcome.ok and outcome.result == {"function": "process"}
    missing, _ = await run(launcher, "import no_such_module_here\n", op="compile", call_id="c2")
    assert missing.error["type"] == "ModuleNotFoundError"


@pytest.mark.parametrize("version", ["3.9", "3.12", "3.13"])
async def test_another_interpreter_runs_the_same_runner(version: str) -> None:
    candidates = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not candidates:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must have Python {version} under {PYENV}")
        pytest.skip(f"no Python {version} under {PYENV}")
    launched = Launcher(str(candidates[-1]))
    await launched.start()
    try:
        outcome = await launched.run(
            RunFrame(
                call_id="v",
                source="import sys\ndef process():\n    return list(sys.version_info[:2])\n",
                node="n",
                flow="f",
            )
        )
        assert outcome.result == [int(part) for part in version.split(".")]
        assert launched.mode == "fork"
    finally:
        await launched.close()


async def test_a_missing_interpreter_is_refused_in_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="cannot run the interpreter"):
        await Launcher(str(tmp_path / "no-python")).start()
    old = tmp_path / "python"
    old.write_text("#!/bin/sh\necho /usr/bin/python2\necho 2 7\n")
    old.chmod(0o755)
    with pytest.raises(LauncherError, match=r"need 3\.9 or later"):
        await Launcher(str(old)).start()


def test_the_runner_is_standard_library_only_and_runs_alone(tmp_path: Path) -> None:
    """runner.py as a host copies it (the package made one file) runs under -I -S, and is
    the very file the launcher runs."""
    assert runner_path().read_text() == runner_source()
    copy = tmp_path / "runner.py"
    copy.write_text(runner_source())
    spec = b'{"op": "run", "source": "def process(a):\\n    return a * 2\\n", "kwargs": {"a": 21}}'
    read_end, write_end = os.pipe()
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(copy), "call", "0", str(write_end)],
        input=spec,
        capture_output=True,
        timeout=60,
        pass_fds=(write_end,),
        check=False,
    )
    os.close(write_end)
    with os.fdopen(read_end, "rb") as records:
        assert records.read() == b'{"kind": "result", "ok": true, "result": 42}\n'
    assert done.returncode == 0
