"""Calls taken ahead (``--pipeline``), with real engine and agent processes: nothing is
lost and nothing runs twice.

Each call appends its name to a file as it starts, then waits for a release file (or
sleeps), so a test sees which calls started, and how often, wherever they ran:

- a call taken ahead and cancelled never starts, and its cancel does not wait for the
  call running before it;
- a worker killed holding calls: the one it ran fails as ``WorkerGone``; those it held go
  back in line and run once, on another worker, spending no retry;
- a worker drained at its job's end runs the calls it holds before it leaves;
- a call that waits for a slot has the artifacts its arguments name fetched meanwhile.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fluksio.client import Client
from tests.support.cli import fluksio
from tests.support.engine import EngineProcess, start_engine
from tests.support.runs import code
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_labelled_worker

pytestmark = pytest.mark.process

STARTS_THEN_WAITS = code("""
    import os
    import time

    def process(name, folder, sleep_s=0):
        with open(os.path.join(folder, "starts.log"), "a") as log:
            log.write(name + "\\n")
        if sleep_s:
            time.sleep(sleep_s)
            return name
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(folder, "release")):
            if time.monotonic() > deadline:
                raise TimeoutError("never released")
            time.sleep(0.05)
        return name
""")
READS_ITS_INPUT = code("""
    import fluksio

    def process(weights):
        with open(fluksio.load_artifact(weights), "rb") as data:
            return len(data.read())
""")
WITHIN_S = 60


def _client(engine: EngineProcess) -> Client:
    return Client(engine.url, token=engine.login())


def _flow(client: Client, label: str, **node: object) -> str:
    name = f"starts-{label}"
    client.put_flow(name, [{"id": "n", "code": STARTS_THEN_WAITS, "worker": label, **node}])
    return name


def _started(folder: Path) -> list[str]:
    log = folder / "starts.log"
    return log.read_text().split() if log.exists() else []


def _in_flight(client: Client, worker_name: str) -> int:
    for worker in client.workers():
        if getattr(worker, "name", None) == worker_name:
            return int(getattr(worker, "in_flight", 0))
    return -1


def _attached(client: Client, label: str) -> str:
    def named() -> str | None:
        for worker in client.workers():
            if label in getattr(worker, "labels", ()):
                return str(worker.name)
        return None

    return wait_for(named, timeout=WITHIN_S, what=f"a worker labelled {label}")


def _start(client: Client, flow: str, name: str, folder: Path, **params: object) -> str:
    return client.start_run(flow, {"name": name, "folder": str(folder), **params}).id


def test_a_call_taken_ahead_and_cancelled_never_starts(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    client = _client(shared_engine)
    admin = shared_engine.login()
    worker = start_labelled_worker(
        shared_engine, admin, "ahead-cancel", tmp_path / "w", "--parallel", "1", "--pipeline", "1"
    )
    try:
        name = _attached(client, "ahead-cancel")
        flow = _flow(client, "ahead-cancel")
        first = _start(client, flow, "first", tmp_path)
        wait_for(lambda: _started(tmp_path) == ["first"], timeout=WITHIN_S, what="first starts")
        ahead = _start(client, flow, "ahead", tmp_path)
        wait_for(lambda: _in_flight(client, name) == 2, timeout=WITHIN_S, what="sent ahead")
        cancelled = client.cancel_run(ahead, wait=30)
        assert cancelled.state == "cancelled"
        assert client.run(first).state == "running"  # the cancel did not wait for it
        (tmp_path / "release").touch()
        assert client.wait_run(first, timeout=WITHIN_S).state == "succeeded"
        assert _started(tmp_path) == ["first"]
    finally:
        worker.stop()


def test_a_call_held_ahead_is_shown_as_sent_ahead_and_timed_from_its_start(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    client = _client(shared_engine)
    admin = shared_engine.login()
    label = "ahead-shown"
    worker = start_labelled_worker(
        shared_engine, admin, label, tmp_path / "w", "--parallel", "1", "--pipeline", "2"
    )
    try:
        name = _attached(client, label)
        flow = _flow(client, label)
        runs = {each: _start(client, flow, each, tmp_path) for each in ("a", "b", "c")}
        wait_for(lambda: _started(tmp_path) == ["a"], timeout=WITHIN_S, what="a starts")
        wait_for(lambda: _in_flight(client, name) == 3, timeout=WITHIN_S, what="b, c held")
        for each in ("b", "c"):
            held = client.run(runs[each]).nodes[0]
            assert (held.state, held.sent_ahead, held.started_at) == ("running", True, None)
            assert held.reason == f"sent ahead to {name}: waits there for a free slot"
        running = client.run(runs["a"]).nodes[0]
        assert (running.sent_ahead, running.reason) == (False, None)
        assert running.started_at is not None
        env = {"FLUKSIO_URL": shared_engine.url, "FLUKSIO_TOKEN": admin}
        listed = fluksio("workers", "list", env=env)
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith(name)]
        assert " 1/1 +2 ahead " in row, row
        shown = fluksio("runs", "show", runs["b"], env=env)
        assert "sent ahead" in shown.stdout and "free slot" in shown.stdout, shown.stdout
        released_at = time.time()
        (tmp_path / "release").touch()
        ended = {each: client.wait_run(run, timeout=WITHIN_S) for each, run in runs.items()}
        assert {each: run.state for each, run in ended.items()} == dict.fromkeys("abc", "succeeded")
        for each in ("b", "c"):
            node = ended[each].nodes[0]
            # Its start is when a slot freed, after the release: its time in line is not
            # in its duration.
            assert node.started_at is not None and node.started_at.timestamp() >= released_at
            assert node.sent_ahead is False
    finally:
        worker.stop()


def test_a_worker_killed_holding_calls_loses_none_and_runs_none_twice(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    client = _client(shared_engine)
    admin = shared_engine.login()
    workers: list[WorkerProcess] = []
    label = "ahead-killed"
    try:
        workers.append(
            start_labelled_worker(
                shared_engine, admin, label, tmp_path / "w1", "--parallel", "1", "--pipeline", "2"
            )
        )
        first_worker = _attached(client, label)
        flow = _flow(client, label, retries=1)
        runs = {name: _start(client, flow, name, tmp_path) for name in ("a", "b", "c")}
        wait_for(lambda: _started(tmp_path) == ["a"], timeout=WITHIN_S, what="a starts")
        wait_for(lambda: _in_flight(client, first_worker) == 3, timeout=WITHIN_S, what="held")
        workers[0].process.kill()
        workers[0].process.wait(timeout=WITHIN_S)
        (tmp_path / "release").touch()
        workers.append(
            start_labelled_worker(
                shared_engine,
                admin,
                label,
                tmp_path / "w2",
                "--parallel",
                "1",
                "--name",
                "second",
                token_name=f"{label}-2",
            )
        )
        ended = {name: client.wait_run(run, timeout=WITHIN_S) for name, run in runs.items()}
        assert {name: run.state for name, run in ended.items()} == dict.fromkeys(
            ("a", "b", "c"), "succeeded"
        )
        # a ran on the killed worker and once more by its retry; b and c, which it only
        # held, ran once, on the second worker, without spending their retry.
        assert sorted(_started(tmp_path)) == ["a", "a", "b", "c"]
        for name in ("b", "c"):
            node = ended[name].nodes[0]
            assert node.provenance is not None and node.provenance.worker.endswith("/second")
            assert node.attempt == 1
        assert ended["a"].nodes[0].attempt == 2
    finally:
        for worker in workers:
            worker.stop()


def test_a_worker_drained_at_its_jobs_end_runs_the_calls_it_holds_first(tmp_path: Path) -> None:
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=("--walltime-margin-s", "10"))
    try:
        client = _client(engine)
        label = "ahead-drained"
        # Placed at once (each call's limit and the margin fit before the end), then
        # inside the margin before the last has run: drained, but only once idle.
        ends_at = f"{time.time() + 24:.0f}"
        worker = start_labelled_worker(
            engine,
            engine.login(),
            label,
            tmp_path / "w",
            "--parallel",
            "1",
            "--pipeline",
            "2",
            "--ends-at",
            ends_at,
        )
        try:
            _attached(client, label)
            flow = _flow(client, label, limit=6)
            runs = [_start(client, flow, name, tmp_path, sleep_s=5) for name in ("a", "b", "c")]
            states = [client.wait_run(run, timeout=WITHIN_S).state for run in runs]
            assert states == ["succeeded"] * 3
            assert _started(tmp_path) == ["a", "b", "c"]
            assert worker.process.wait(timeout=WITHIN_S) == 0
            assert "drained by the engine" in worker.logs()
        finally:
            worker.stop()
    finally:
        engine.stop()


def test_a_call_that_waits_for_a_slot_has_its_inputs_fetched_meanwhile(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    client = _client(shared_engine)
    label = "ahead-inputs"
    cache = tmp_path / "cache"
    worker = start_labelled_worker(
        shared_engine,
        shared_engine.login(),
        label,
        tmp_path / "w",
        "--parallel",
        "1",
        "--pipeline",
        "1",
        "--artifact-transport",
        "http",  # as on another machine: no shared store, a cache of its own
        env={"FLUKSIO_ARTIFACT_CACHE": str(cache)},
    )
    try:
        _attached(client, label)
        blocker = _start(client, _flow(client, label), "first", tmp_path)
        wait_for(lambda: _started(tmp_path) == ["first"], timeout=WITHIN_S, what="first starts")
        weights = client.put_artifact(b"\x01" * 300_000, name="weights.bin")
        client.put_flow("reads", [{"id": "n", "code": READS_ITS_INPUT, "worker": label}])
        reader = client.start_run("reads", {"weights": weights.model_dump()}).id
        cached = cache / "sha256" / weights.digest[7:9] / weights.digest[7:]
        wait_for(cached.exists, timeout=WITHIN_S, what="the input fetched while it waits")
        assert client.run(blocker).state == "running"
        (tmp_path / "release").touch()
        read = client.wait_run(reader, timeout=WITHIN_S)
        assert (read.state, read.nodes[0].result) == ("succeeded", 300_000)
    finally:
        worker.stop()
