"""``client.executor(...)``: Python functions submitted from a script run as nodes on a worker.

Against an engine of the test's own (``local()``) with a real ``fluksio-worker`` labelled
``gpu``: a submitted call's result and where it ran; ``map`` as one run, results in order;
a remote exception with its traceback, naming this file's lines; helpers, classes,
constants and imports of this module travelling with a function, as from a script's
``__main__``; what cannot travel refused at submit in one sentence (a lambda, a closure,
a live object, an argument that is not JSON); ``imports``; a call cancelled;
``shutdown(cancel_futures=True)``.
"""

from __future__ import annotations

import inspect
import math
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, as_completed, wait
from pathlib import Path

import pytest

from fluksio.client import CannotSend, Client, RemoteError
from fluksio.client.executor import RemoteExecutor
from fluksio.wire.flows import NodeSettings, RetryPolicy

pytestmark = pytest.mark.process

SCALE = 10  # a constant of a plain value: it travels with what reads it
LOCK = threading.Lock()  # a live object: what reads it cannot travel


def square(x: int) -> int:
    return x * x


def where_am_i() -> str:
    import socket  # noqa: PLC0415 -- inside: what travels is the function alone

    return socket.gethostname()


def fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"bad item {x}")
    return x


def fails_first(marker: str) -> str:
    import os  # noqa: PLC0415

    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first try")
    return "again"


def root_of(x: float) -> float:
    root: float = sqrt(x)  # type: ignore[name-defined]  # noqa: F821 -- named in imports=
    return root


def scaled(x: int) -> int:
    return x * SCALE


class Point:
    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y

    def norm(self) -> float:
        return math.hypot(self.x, self.y)  # math: imported at the top of this file


def _length(x: float, y: float) -> float:
    return Point(x, y).norm()


def scaled_length(x: float, y: float) -> float:
    return round(_length(x, y) * SCALE, 6)  # a helper, a class, a constant, an import


class _Registry:
    """A live object whose method decorates (as a task registry's would): not sent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []

    def task(self, fn: Callable[[int], int]) -> Callable[[int], int]:
        self.names.append(fn.__name__)
        return fn


TASKS = _Registry()


@TASKS.task
def decorated(x: int) -> int:
    return x + 1


TABLE = list(range(20_000))  # plain, but too long to travel written out


def looks_up(x: int) -> int:
    return TABLE[x]


def locked(x: int) -> int:
    with LOCK:
        return x


def sleeps(seconds: float) -> str:
    import time  # noqa: PLC0415

    time.sleep(seconds)
    return "woke"


def once_opened(gate: str, value: int) -> int:
    import os  # noqa: PLC0415
    import time  # noqa: PLC0415

    deadline = time.monotonic() + 60
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)  # a node waiting for its test to let it go
    return value


def reports(x: int) -> int:
    import fluksio  # noqa: PLC0415 -- the runner's, inside a node

    fluksio.emit(seen=x)  # type: ignore[attr-defined]
    return x


def _line_of(fn: object, name: str) -> int:
    lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if name in line)


def test_a_submitted_call_returns_its_result_and_says_where_it_ran(gpu: RemoteExecutor) -> None:
    future = gpu.submit(square, 7)
    assert future.result(timeout=60) == 49
    assert future.provenance is not None and future.provenance.worker == "local-worker"
    assert gpu.submit(where_am_i).result(timeout=60)


def test_map_is_one_run_of_an_array_with_an_item_per_call(
    client: Client, gpu: RemoteExecutor
) -> None:
    before = len(client.runs())
    assert list(gpu.map(square, range(20), timeout=120)) == [x * x for x in range(20)]
    runs = client.runs()
    assert len(runs) == before + 1
    (node,) = client.run(runs[0].id).nodes
    assert node.array is not None and node.array.counts == {"succeeded": 20}
    # Each item ran on the worker, and says so.
    page = client.items(runs[0].id)
    assert {item.ran_on for item in page.items} == {"local-worker"}
    # Its flow names its items' artifacts: transient, it goes with its last run.
    assert client.flow(runs[0].flow).transient


def test_a_map_of_more_items_than_a_flow_held_runs_in_order(
    client: Client, gpu: RemoteExecutor
) -> None:
    # 12,000 calls: past the 10,000 nodes a flow may have, and 5,000 met the body limit.
    results = gpu.map(square, range(12_000), chunksize=40, timeout=300)
    assert list(results) == [x * x for x in range(12_000)]
    node = client.run(client.runs()[0].id).nodes[0]
    assert node.array is not None and node.array.total == 300


def test_map_packs_chunksize_items_into_one_call(client: Client, gpu: RemoteExecutor) -> None:
    results = list(gpu.map(square, range(25), chunksize=10, timeout=120))
    assert results == [x * x for x in range(25)]
    (node,) = client.run(client.runs()[0].id).nodes
    assert node.array is not None and node.array.total == 3, "10 + 10 + 5 items"
    with pytest.raises(ValueError, match="chunksize must be >= 1"):
        gpu.map(square, range(3), chunksize=0)


def test_a_remote_exception_comes_back_with_its_traceback(gpu: RemoteExecutor) -> None:
    results = gpu.map(fails_on_three, [1, 3])
    assert next(results) == 1
    with pytest.raises(RemoteError) as raised:
        next(results)
    failure = raised.value
    assert (failure.type, failure.message) == ("ValueError", "bad item 3")
    assert "fails_on_three" in failure.traceback
    assert "Remote traceback" in str(failure)
    raising = inspect.getsourcelines(fails_on_three)[1] + 2
    assert f'File "{__file__}", line {raising}, in fails_on_three' in failure.traceback, (
        failure.traceback
    )


def test_helpers_classes_constants_and_imports_travel_with_the_function(
    gpu: RemoteExecutor,
) -> None:
    assert gpu.submit(scaled, 4).result(timeout=60) == 40
    assert gpu.submit(decorated, 1).result(timeout=60) == 2  # its decorator stays here
    assert gpu.submit(scaled_length, 3.0, 4.0).result(timeout=60) == 50.0


@pytest.mark.parametrize(
    ("fn", "args", "said"),
    [
        (lambda x: x, (1,), "a lambda cannot be sent: define the function with def"),
        (locked, (1,), f"locked uses LOCK ({__file__}, line {_line_of(locked, 'LOCK')}), a"),
        (square, (b"bytes",), "argument 1 of square is not JSON (a bytes)"),
        (math.sqrt, (4,), "sqrt is not a function defined with def"),
        (looks_up, (1,), "characters written out, over the 65536 a constant may travel as"),
    ],
    ids=["lambda", "live-object", "not-json", "builtin", "long-constant"],
)
def test_what_cannot_travel_is_refused_at_submit(
    gpu: RemoteExecutor, fn: object, args: tuple[object, ...], said: str
) -> None:
    with pytest.raises(CannotSend, match=re.escape(said)):
        gpu.submit(fn, *args)  # type: ignore[arg-type]


SCRIPT = """
import json, math
from fluksio.client import local

OFFSET = {"base": 100}


def shifted(x):
    return OFFSET["base"] + x


def work(x):
    return shifted(int(math.sqrt(x)))


with local(worker_labels=["gpu"]) as client:
    with client.executor(worker="gpu", limit=60) as executor:
        print(json.dumps(list(executor.map(work, [1, 4, 9]))))
"""


def test_a_scripts_own_function_with_its_helper_runs(tmp_path: Path) -> None:
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[101, 102, 103]"


def test_a_closure_is_refused_at_submit(gpu: RemoteExecutor) -> None:
    factor = 3

    def times(x: int) -> int:
        return x * factor

    with pytest.raises(CannotSend, match="times is defined inside"):
        gpu.submit(times, 2)


def test_imports_named_travel_with_the_function(client: Client) -> None:
    with client.executor(worker="gpu", imports=["from math import sqrt"]) as executor:
        assert executor.submit(root_of, 81.0).result(timeout=60) == 9.0


def test_retry_runs_a_failed_call_again_as_a_node_would(client: Client, tmp_path: Path) -> None:
    once = RetryPolicy(on=["NodeError"], times=1, backoff_s=0)
    with client.executor(worker="gpu", retry=once) as retrying:
        assert retrying.submit(fails_first, str(tmp_path / "a")).result(timeout=60) == "again"
    with client.executor(worker="gpu") as plain, pytest.raises(RemoteError, match="first try"):
        plain.submit(fails_first, str(tmp_path / "b")).result(timeout=60)


def test_a_setting_no_node_may_have_is_refused_when_the_executor_is_made(client: Client) -> None:
    with pytest.raises(ValueError, match=r"^retry\.on\.0: Input should be 'NodeError'"):
        client.executor(retry={"on": ["Sometimes"], "times": 1})
    with pytest.raises(ValueError, match=r'^retry: .*give "retry" or "retries", not both'):
        client.executor(retries=2, retry={"on": ["NodeError"], "times": 1})
    with pytest.raises(ValueError, match=r"^limit: Input should be greater than 0"):
        client.executor(limit=-1)
    with pytest.raises(ValueError, match=r"^items: the executor sets it for each call"):
        client.executor(items=[{"x": 1}])
    with pytest.raises(ValueError, match=r"^executor: give limit in the NodeSettings"):
        client.executor(NodeSettings(worker="gpu"), limit=5)


def test_the_settings_may_be_one_typed_model_placed_as_by_name(client: Client) -> None:
    settings = NodeSettings(worker="gpu", retry=RetryPolicy(on=["NodeError"], times=1))
    with client.executor(settings, imports=["from math import sqrt"]) as typed:
        future = typed.submit(root_of, 16.0)
        assert future.result(timeout=60) == 4.0
    (node,) = client.flow(client.run(future.run_id).flow).nodes
    assert (node["worker"], node["retry"]) == ("gpu", settings.model_dump(mode="json")["retry"])


def test_a_call_is_cancelled_on_the_engine(client: Client, gpu: RemoteExecutor) -> None:
    future = gpu.submit(sleeps, 300)
    assert future.cancel()
    assert future.cancelled()
    run = client.wait_run(future.run_id, timeout=60)
    assert run.state == "cancelled"


def test_shutdown_cancels_what_has_not_ended(client: Client) -> None:
    executor = client.executor(worker="gpu")
    results = executor.map(sleeps, [300, 300])
    executor.shutdown(wait=True, cancel_futures=True)
    with pytest.raises(CancelledError):
        next(results)
    run_id = client.runs()[0].id
    assert client.wait_run(run_id, timeout=60).state == "cancelled"
    with pytest.raises(RuntimeError, match="after its shutdown"):
        executor.submit(square, 1)


def test_a_call_reports_events_as_any_node_does(client: Client, gpu: RemoteExecutor) -> None:
    future = gpu.submit(reports, 5)
    assert future.result(timeout=60) == 5
    node = client.run(future.run_id).nodes[0]
    assert {"seen": 5} in [event.get("outputs") for event in node.events]


def test_a_future_is_an_argument_the_engine_waits_for(
    client: Client, gpu: RemoteExecutor, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first = gpu.submit(once_opened, str(gate), 6)
    second = gpu.submit(square, first)
    waiting = client.run(second.run_id)
    assert waiting.state == "queued"
    assert waiting.reason == f"waits for the result of node 'call' of run {first.run_id}"
    assert not second.done()
    gate.write_text("open")
    assert second.result(timeout=60) == 36
    # Nested in the arguments too, and once the first has ended already.
    assert gpu.submit(math_sum, [first, first, 1]).result(timeout=60) == 13
    failed = gpu.submit(fails_on_three, 3)
    after = gpu.submit(square, failed)
    with pytest.raises(RemoteError) as raised:
        after.result(timeout=60)
    assert raised.value.type == "Skipped"
    assert f"node 'call' of run {failed.run_id}, which failed" in raised.value.message
    with pytest.raises(CannotSend, match="only a future of this executor's submit"):
        gpu.submit(square, client.executor(worker="gpu").submit(square, 1))


def math_sum(values: list[int]) -> int:
    return sum(values)


def test_leaving_the_block_waits_for_a_map_whose_results_were_not_read(
    client: Client, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with client.executor(worker="gpu") as executor:
        executor.map(once_opened, [str(gate)] * 3, [1, 2, 3])  # never read
        threading.Timer(0.5, gate.write_text, ("open",)).start()
    run = client.runs()[0]
    assert run.state == "succeeded", "the block waited for the map to end"


def test_a_maps_futures_come_out_of_as_completed_as_their_items_end(
    tmp_path: Path, client: Client, gpu: RemoteExecutor
) -> None:
    # Item 0 holds the worker's one slot until its gate opens; item 3 is cancelled on the
    # engine meanwhile. Its future comes out first, though three come before it in order.
    held, opened = tmp_path / "held", tmp_path / "opened"
    opened.touch()
    gates = [str(held)] + [str(opened)] * 4
    futures = gpu.map_futures(once_opened, gates, range(5))
    (run_id,) = {future.run_id for future in futures}
    client.cancel_items(run_id, [3])
    done = as_completed(futures, timeout=120)
    first = next(done)
    assert first is futures[3] and first.cancelled()
    held.touch()
    rest = [next(done) for _ in range(4)]
    assert [n for n, future in enumerate(futures) if future in rest] == [0, 1, 2, 4]
    assert [futures[n].result() for n in (0, 1, 2, 4)] == [0, 1, 2, 4]
    assert {futures[n].provenance.worker for n in (0, 1, 2, 4)} == {"local-worker"}  # type: ignore[union-attr]


def test_a_maps_futures_share_their_chunks_end_and_cancel(
    tmp_path: Path, client: Client, gpu: RemoteExecutor
) -> None:
    held = tmp_path / "held"
    futures = gpu.map_futures(once_opened, [str(held)] * 5, range(5), chunksize=2)
    assert [future.item for future in futures] == [0, 0, 1, 1, 2]
    assert futures[3].cancel(), "cancelled on the engine: item 1, both its inputs"
    done, _pending = wait([futures[2]], timeout=60)
    assert futures[2] in done and futures[2].cancelled()
    held.touch()
    assert [futures[n].result(timeout=120) for n in (0, 1, 4)] == [0, 1, 4]
    page = client.items(futures[0].run_id)
    assert [item.state for item in page.items] == ["succeeded", "cancelled", "succeeded"]
    with pytest.raises(RemoteError, match="bad item 3"):
        gpu.map_futures(fails_on_three, [3])[0].result(timeout=60)
