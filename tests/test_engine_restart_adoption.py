"""A call running on a worker outlives the engine (issue 50, parts 1 and 2): the engine is
killed (SIGKILL) or stopped for an upgrade (SIGTERM) while the call runs, started again on
its data directory and port, and the worker, which kept the call running meanwhile, comes
back naming it: the call is adopted and ends once, with its own result. Real engine and
worker processes; each call writes a ledger line when it starts and when it ends."""

from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluksio.client import Client
from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.process import alive, written_pid
from tests.support.proxy import PausableProxy
from tests.support.runs import code, get_run, node_of, run_flow, wait_run
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, attach_url, start_labelled_worker

pytestmark = pytest.mark.process


def _held_call(ledger: Path, release: Path) -> str:
    """Node code that notes its start, prints, waits for ``release`` and notes its end."""
    return code(f"""
        import os, time
        def process():
            open({str(ledger)!r}, "a").write("start\\n")
            print("before the restart", flush=True)
            for _ in range(1200):
                if os.path.exists({str(release)!r}):
                    break
                time.sleep(0.1)
            print("after the restart", flush=True)
            open({str(ledger)!r}, "a").write("end\\n")
            return "ran once"
    """)


@dataclass
class Restart:
    """An engine, a worker labelled cpu on it, and the engine started again later."""

    tmp_path: Path
    engine: EngineProcess
    admin: str
    worker: WorkerProcess
    second: EngineProcess | None = None

    @classmethod
    def begin(cls, tmp_path: Path) -> Restart:
        engine = start_engine(tmp_path / "data", tmp_path / "logs1", port=free_port())
        admin = engine.login()
        worker = start_labelled_worker(engine, admin, "cpu", tmp_path / "worker")
        return cls(tmp_path, engine, admin, worker)

    def again(self, stop_signal: int, *args: str) -> EngineProcess:
        """Stop the engine with ``stop_signal``; a new one on its data directory and port."""
        self.engine.stop(stop_signal)
        port = int(self.engine.url.rsplit(":", 1)[1])
        self.second = start_engine(
            self.engine.data_dir, self.tmp_path / "logs2", port=port, args=args
        )
        self.admin = self.second.login()
        return self.second

    def adopted(self, run_id: str, node_id: str) -> None:
        """Wait until the node's events say its worker came back with it (as ``runs
        show`` lists them)."""

        def said() -> bool:
            assert self.second is not None
            events = node_of(self.second, self.admin, run_id, node_id)["events"]
            return any(event["event"] == "adopted" for event in events)

        wait_for(said, timeout=60, what="the worker to come back and its call to be adopted")

    def end(self) -> None:
        self.worker.stop()
        self.engine.stop()
        if self.second is not None:
            self.second.stop()


def _held_call_started(scene: Restart) -> str:
    """A run whose held call has started on the worker (its ledger and release files in
    the test's directory)."""
    ledger, release = scene.tmp_path / "ledger", scene.tmp_path / "release"
    node = {"id": "long", "worker": "cpu", "code": _held_call(ledger, release)}
    run_id = run_flow(scene.engine, scene.admin, "long", [node])
    wait_for(ledger.exists, timeout=60, what="the call to start on the worker")
    return run_id


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_call_on_a_worker_is_adopted_by_the_restarted_engine_and_runs_once(
    tmp_path: Path, stop_signal: int
) -> None:
    # Before, the call failed EngineRestarted (or, with retry_on_restart, ran again from
    # its start) though its worker and its process lived through the restart.
    scene = Restart.begin(tmp_path)
    try:
        run_id = _held_call_started(scene)
        second = scene.again(stop_signal)
        scene.adopted(run_id, "long")
        (tmp_path / "release").touch()
        run = wait_run(second, scene.admin, run_id, timeout=60)
        assert run["state"] == "succeeded", run
        long = node_of(second, scene.admin, run_id, "long")
        assert (long["result"], long["attempt"]) == ("ran once", 1)
        assert (tmp_path / "ledger").read_text().split() == ["start", "end"]
        assert [e["event"] for e in long["events"]] == ["adopted"]
        # Its output is the whole of it, as the worker's answer carried it.
        assert "after the restart" in (long["logs"] or ""), long
        assert scene.worker.process.poll() is None, scene.worker.logs()
    finally:
        scene.end()


def square_when_released(x: int, release: str) -> int:
    import os  # noqa: PLC0415 - travels to the worker with the function
    import time  # noqa: PLC0415

    for _ in range(1200):
        if os.path.exists(release):
            break
        time.sleep(0.1)
    return x * x


def test_a_script_waiting_on_a_future_gets_its_result_across_the_restart(tmp_path: Path) -> None:
    scene = Restart.begin(tmp_path)
    client = Client(scene.engine.url, token=scene.admin, ride_over_s=90)
    executor = client.executor(worker="cpu")
    try:
        future = executor.submit(square_when_released, 9, str(tmp_path / "release"))
        wait_for(
            lambda: client.run(future.run_id).state == "running",
            timeout=60,
            what="the call to run on the worker",
        )
        scene.again(signal.SIGKILL)
        scene.adopted(future.run_id, "call")
        (tmp_path / "release").touch()
        assert future.result(timeout=60) == 81
        assert client.run(future.run_id).nodes[0].attempt == 1
    finally:
        executor.shutdown(wait=False)
        scene.end()


def test_a_call_whose_worker_never_comes_back_fails_worker_gone_at_the_window(
    tmp_path: Path,
) -> None:
    scene = Restart.begin(tmp_path)
    try:
        run_id = _held_call_started(scene)
        scene.engine.stop(signal.SIGKILL)
        scene.worker.stop()  # its machine is gone too, while the engine is away
        second = scene.again(signal.SIGKILL, "--worker-return-s", "2")
        run = wait_run(second, scene.admin, run_id, timeout=60)
        long = node_of(second, scene.admin, run_id, "long")
        assert run["state"] == "failed"
        assert long["error"]["type"] == "WorkerGone"
        said = "did not come back within 2 s (--worker-return-s): a worker that takes longer"
        assert said in long["error"]["message"]
    finally:
        scene.end()


def test_a_live_engine_fails_a_dropped_workers_call_at_once_and_its_copy_is_stopped(
    tmp_path: Path,
) -> None:
    # The agent keeps its calls through any drop (it cannot tell a restarting engine from
    # a cut path); an engine that lived through it failed the call at once, as the spec
    # says, and tells the worker back to drop it: no copy runs on unseen.
    pid_file = tmp_path / "pid"
    node_code = code(f"""
        import os, time
        def process():
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(300)
    """)
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    admin = engine.login()
    proxy = PausableProxy(int(engine.url.rsplit(":", 1)[1]))
    url = attach_url(engine, proxy.port)
    worker = start_labelled_worker(engine, admin, "cpu", tmp_path / "worker", url=url)
    try:
        run_id = run_flow(engine, admin, "cut", [{"id": "n", "worker": "cpu", "code": node_code}])
        pid = written_pid(pid_file)
        # Its dial back waits in the paused path until the engine has read the close: a
        # hello read first would find its connection open still, and carry the call on.
        proxy.pause()
        proxy.cut()
        run = wait_run(engine, admin, run_id, timeout=30)
        proxy.resume()
        error = run["nodes"][0]["error"]
        assert (run["state"], error["type"]) == ("failed", "WorkerGone"), run
        wait_for(lambda: not alive(pid), timeout=60, what="the kept copy to be stopped")
        assert "dropped): keeping 1 call(s)" in worker.logs()
    finally:
        worker.stop()
        proxy.close()
        engine.stop()


def test_an_idle_worker_still_stops_at_max_idle_when_its_engine_is_killed(tmp_path: Path) -> None:
    # Its last answer is confirmed at once, so nothing is held for an engine that is gone:
    # before, it waited for --engine-away-s (10 minutes), holding its batch job.
    engine = start_engine(tmp_path / "data", tmp_path / "logs")
    admin = engine.login()
    worker = start_labelled_worker(engine, admin, "cpu", tmp_path / "worker", "--max-idle", "3")
    try:
        node = {"id": "n", "worker": "cpu", "code": "def process():\n    return 1\n"}
        run = wait_run(engine, admin, run_flow(engine, admin, "once", [node]), timeout=60)
        assert run["state"] == "succeeded", run
        # Killed once the engine has confirmed the answer (a pong), as it does at once: an
        # engine killed before that leaves the answer held for --engine-away-s, by design.
        wait_for(lambda: "idle: stopping after" in worker.logs(), timeout=30, what="idle")
        engine.stop(signal.SIGKILL)
        assert worker.process.wait(timeout=60) == 0, worker.logs()
    finally:
        worker.stop()
        engine.stop()


def test_two_workers_of_one_name_each_get_back_their_own_calls_and_each_runs_once(
    tmp_path: Path,
) -> None:
    # As every job of one Slurm profile: two workers named hpc-small, on tokens of their
    # own. One is frozen across the restart, so the other comes back first naming its own
    # calls only. Before, the frozen one's calls (of the same name, not named) went back
    # in line while it still ran them, and started twice.
    ledger, release = tmp_path / "ledger", tmp_path / "release"
    scene = Restart.begin(tmp_path)
    named = ("--name", "hpc-small", "--parallel", "2", "--pipeline", "0")
    second_worker = start_labelled_worker(
        scene.engine, scene.admin, "cpu", tmp_path / "worker2", *named, token_name="hpc-small"
    )
    scene.worker.stop()
    scene.worker = start_labelled_worker(
        scene.engine, scene.admin, "cpu", tmp_path / "worker1", *named, token_name="hpc-small"
    )
    nodes = []
    for index in range(4):
        held = _held_call(ledger, release).replace('"start', f'"s{index} start')
        nodes.append({"id": f"s{index}", "worker": "cpu", "code": held})
    try:
        run_id = run_flow(scene.engine, scene.admin, "shared", nodes)

        def started() -> int:
            return ledger.read_text().count("start") if ledger.exists() else 0

        wait_for(lambda: started() == 4, timeout=60, what="the four calls to start")
        second_worker.freeze()
        try:
            scene.again(signal.SIGKILL)
            adopted = wait_for(
                lambda: _adopted_nodes(scene, run_id) or None,
                timeout=60,
                what="the first worker back and its calls adopted",
            )
            assert len(adopted) == 2, adopted
            still = get_run(scene.second or scene.engine, scene.admin, run_id)["nodes"]
            assert all(node["state"] == "running" for node in still), still
        finally:
            second_worker.thaw()
        wait_for(
            lambda: len(_adopted_nodes(scene, run_id)) == 4,
            timeout=60,
            what="the frozen worker back and its calls adopted",
        )
        release.touch()
        run = wait_run(scene.second or scene.engine, scene.admin, run_id, timeout=60)
        assert run["state"] == "succeeded", run
        assert all(node["attempt"] == 1 for node in run["nodes"]), run
        starts = sorted(line for line in ledger.read_text().split("\n") if "start" in line)
        assert starts == [f"s{index} start" for index in range(4)], starts
    finally:
        second_worker.stop()
        scene.end()


def _adopted_nodes(scene: Restart, run_id: str) -> list[str]:
    engine = scene.second or scene.engine
    nodes = get_run(engine, scene.admin, run_id)["nodes"]
    return [n["id"] for n in nodes if any(e["event"] == "adopted" for e in n["events"])]


def marked_when_released(x: int, marks: str, release: str) -> int:
    import os  # noqa: PLC0415 - travels to the worker with the function
    import time  # noqa: PLC0415

    with open(os.path.join(marks, str(x)), "a") as mark:
        mark.write("x")
    for _ in range(1200):
        if x < 4 or os.path.exists(release):
            break
        time.sleep(0.1)
    return x * x


@pytest.mark.parametrize("kind", ["map", "map_futures"])
def test_a_maps_items_on_a_worker_are_adopted_and_the_map_rides_over_the_restart(
    tmp_path: Path, kind: str
) -> None:
    # Before, every item running on the worker failed EngineRestarted although the worker
    # finished it, and the script's map raised: the items after them never ran.
    marks, release = tmp_path / "marks", tmp_path / "release"
    marks.mkdir()
    scene = Restart.begin(tmp_path)
    scene.worker.stop()
    scene.worker = start_labelled_worker(
        scene.engine, scene.admin, "cpu", tmp_path / "worker4", "--parallel", "4"
    )
    client = Client(scene.engine.url, token=scene.admin, ride_over_s=90)
    executor = client.executor(worker="cpu")
    inputs = range(16)
    try:
        call = (marked_when_released, inputs, [str(marks)] * 16, [str(release)] * 16)
        if kind == "map":
            results = executor.map(*call)
        else:
            futures = executor.map_futures(*call)
        wait_for(lambda: len(list(marks.iterdir())) == 8, timeout=60, what="four done, four held")
        scene.again(signal.SIGKILL)
        release.touch()
        if kind == "map":
            assert list(results) == [x * x for x in inputs]
        else:
            assert [future.result(timeout=60) for future in futures] == [x * x for x in inputs]
        runs = {x: (marks / str(x)).read_text() for x in inputs}
        assert all(ran == "x" for ran in runs.values()), f"each started once: {runs}"
    finally:
        executor.shutdown(wait=False)
        scene.end()


def square(x: int) -> int:
    return x * x


def test_a_map_sent_while_the_engine_restarts_rides_over_its_absence(tmp_path: Path) -> None:
    # Before, a map or a call sent while the engine was down raised Unreachable at once:
    # only waiting rode over a restart. A connection refused never reached an engine, so
    # sending again cannot start the map twice.
    scene = Restart.begin(tmp_path)
    client = Client(scene.engine.url, token=scene.admin, ride_over_s=90)
    executor = client.executor(worker="cpu")
    results: list[int] = []
    try:
        assert executor.submit(square, 2).result(timeout=60) == 4  # a script under way
        scene.engine.stop(signal.SIGKILL)
        sender = threading.Thread(
            target=lambda: results.extend(executor.map(square, range(8))), daemon=True
        )
        sender.start()
        wait_for(
            lambda: not sender.is_alive() or _waiting_in(sender, "unsent_again"),
            timeout=30,
            what="the map to be refused by the engine that is down",
        )
        assert sender.is_alive(), "the map raised instead of waiting for the engine"
        scene.again(signal.SIGKILL)
        sender.join(timeout=90)
        assert results == [x * x for x in range(8)]
        assert scene.second is not None
        listed = scene.second.client(scene.admin).request("GET", "/runs").body
        assert len(listed) == 2, f"the call and one map, sent once: {listed}"
    finally:
        executor.shutdown(wait=False)
        scene.end()


def _waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is, right now, inside ``function`` (read from its stack)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False
