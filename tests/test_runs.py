"""Flows and runs: order, concurrency, failures, cancel, reasons; restarts in real processes.

Most of these run the engine in the test's process (``create_app`` behind pytest-aiohttp)
with its real launcher, so node code runs in real processes while a failure points at a
line; what only a real engine process shows (its environment, its logs, being killed and
started again, the command line) is at the end.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fluksio.wire.provenance import Provenance
from tests.support.engine import EngineProcess, engine_env, start_engine
from tests.support.inprocess import InProcessEngine
from tests.support.process import alive
from tests.support.runs import code, nodes_of, put_flow, start_run, wait_run
from tests.support.wait import async_wait_for, poll_async

# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "field", "words"),
    [
        ([{"id": "a", "code": "x=1", "after": ["ghost"]}], "nodes.0.after.0", "not in this flow"),
        (
            [
                {"id": "a", "code": "x=1", "after": ["b"]},
                {"id": "b", "code": "x=1", "after": ["a"]},
            ],
            "nodes",
            "cycle: a -> b -> a",
        ),
        ([{"id": "a", "code": "x=1"}, {"id": "a", "code": "y=1"}], "nodes.1.id", "already the id"),
        ([{"id": "a", "code": "x=1", "worker_policy": "maybe"}], "nodes.0.worker_policy", ""),
        ([{"id": "a", "code": "x=1", "resources": {"cpus": -1}}], "nodes.0.resources.cpus", ""),
        ([{"id": "a", "code": "def process(:\n"}], "nodes.0.code", "line 1"),
        ([{"id": "a-b", "code": "x=1"}], "nodes.0.id", ""),
        ([{"id": "a", "code": "x=1", "params": {"p": {"$secret": 3}}}], "nodes.0", "secret"),
        ([], "nodes", ""),
        ([{"id": "a", "code": "x=1", "resources": {"cpus": "8"}}], "nodes.0.resources.cpus", ""),
        ([{"id": "a", "code": "x=1", "retry_on_restart": "yes"}], "nodes.0.retry_on_restart", ""),
        ([{"id": "a", "code": "x=1", "timeout": "10"}], "nodes.0.timeout", ""),
        ([{"id": "a", "code": "x=1", "limit": 0}], "nodes.0.limit", "greater than 0"),
        ([{"id": "a", "code": "x=1", "limit": "20"}], "nodes.0.limit", ""),
        ([{"id": "a", "code": "x=1", "limit": 1e12}], "nodes.0.limit", "less than or equal"),
    ],
    ids=[
        "unknown-dep",
        "cycle",
        "duplicate",
        "bad-policy",
        "negative",
        "syntax",
        "bad-id",
        "bad-secret-ref",
        "empty",
        "string-for-a-number",
        "string-for-a-bool",
        "string-for-seconds",
        "zero-limit",
        "string-limit",
        "endless-limit",
    ],
)
async def test_flow_validation_names_the_field(
    api: InProcessEngine, nodes: list[dict[str, Any]], field: str, words: str
) -> None:
    answer = await api.put_flow("invalid", nodes)
    assert answer.status == 422, answer
    assert answer.body["field"].startswith(field)
    assert words in answer.body["detail"]
    assert (await api.request("GET", "/flows/invalid")).status == 404


async def test_engine_bound_code_is_checked_at_save_and_worker_bound_code_is_not(
    api: InProcessEngine,
) -> None:
    newer = 'type Pair = tuple[int, int]\ndef process():\n    return f"{"a"}"\n'
    here = {"id": "here", "code": "import only_on_the_gpu_box\ndef process(:"}
    refused = await api.put_flow("bound", [here])
    assert refused.status == 422 and refused.body["field"] == "nodes.0.code"
    assert refused.body["detail"].startswith("nodes.0.code: line 2: ")
    assert "(node 'here', checked with the engine's Python 3." in refused.body["detail"]
    # Bound to a worker, it is compiled by the worker's Python, which may be newer (3.12
    # syntax here) or find an error this one would not: the engine refuses neither.
    remote = {"id": "remote", "code": newer, "device": "gpu", "device_policy": "prefer"}
    broken = {"id": "broken", "code": "def process(:", "worker": "gpu"}
    answer = await api.put_flow("bound", [remote, broken])
    assert answer.status == 201, answer
    stored = answer.body["nodes"][0]
    assert (stored["worker"], stored["worker_policy"]) == ("gpu", "prefer")
    assert "device" not in stored and "device_policy" not in stored
    listed = (await api.request("GET", "/flows")).body
    assert {k: listed[0][k] for k in ("name", "nodes")} == {"name": "bound", "nodes": 2}
    assert (await api.request("DELETE", "/flows/bound")).status == 200
    assert (await api.request("DELETE", "/flows/bound")).status == 404


# -- running ---------------------------------------------------------------------------


async def test_dependency_order_concurrency_and_results_by_node_id(api: InProcessEngine) -> None:
    sleeper = code("""
        import time
        def process(start):
            began = time.time()
            time.sleep(0.6)
            return [began, time.time()]
    """)
    nodes: list[dict[str, Any]] = [
        {"id": "start", "code": "def process(base):\n    return base\n"},
        {"id": "left", "code": sleeper, "after": ["start"]},
        {"id": "right", "code": sleeper, "after": ["start"]},
        {
            "id": "join",
            "code": code("""
            import time
            def process(left, right, start, unrelated=None):
                return {"began": time.time(), "after": max(left[1], right[1]), "start": start}
        """),
            "after": ["left", "right", "start"],
        },
    ]
    assert (await api.put_flow("diamond", nodes)).status == 201
    run = await api.wait_run((await api.start_run("diamond", base=7))["id"])
    assert run["state"] == "succeeded"
    by_id = nodes_of(run)
    left, right = by_id["left"]["result"], by_id["right"]["result"]
    assert left[0] < right[1] and right[0] < left[1], "independent nodes ran at the same time"
    join = by_id["join"]["result"]
    assert join["began"] >= join["after"] and join["start"] == 7
    assert all(node["ran_on"] == "engine" for node in run["nodes"])


async def test_a_failing_node_returns_its_traceback_and_skips_what_follows(
    api: InProcessEngine,
) -> None:
    nodes: list[dict[str, Any]] = [
        {
            "id": "boom",
            "code": code("""
            def process():
                return divide(1, 0)
            def divide(a, b):
                return a / b
        """),
        },
        {"id": "after_boom", "code": "def process(boom):\n    return boom\n", "after": ["boom"]},
        {"id": "then", "code": "def process():\n    return 1\n", "after": ["after_boom"]},
        {"id": "independent", "code": "def process():\n    return 'fine'\n"},
    ]
    await api.put_flow("failing", nodes)
    run = await api.wait_run((await api.start_run("failing"))["id"])
    assert run["state"] == "failed"
    by_id = nodes_of(run)
    error = by_id["boom"]["error"]
    assert error["type"] == "ZeroDivisionError"
    assert "line 4, in divide" in error["traceback"]
    assert by_id["after_boom"]["state"] == "skipped"
    assert by_id["after_boom"]["error"]["message"] == "dependency 'boom' failed"
    assert by_id["then"]["error"]["message"] == "dependency 'after_boom' skipped"
    assert by_id["independent"]["state"] == "succeeded"


async def test_cancel_kills_the_node_and_leaves_other_runs_of_it_alone(
    api: InProcessEngine,
) -> None:
    waits = code("""
        import os, time, fluksio
        def process():
            fluksio.emit(pid=os.getpid())
            time.sleep(120)
    """)
    await api.put_flow("slow", [{"id": "wait", "code": waits}])
    first = (await api.start_run("slow"))["id"]
    second = (await api.start_run("slow"))["id"]

    async def pid_of(run_id: str) -> int:
        async def started() -> int | None:
            events = nodes_of(await api.run(run_id))["wait"]["events"]
            return int(events[0]["outputs"]["pid"]) if events else None

        return await poll_async(started, timeout=20, what=f"the node of {run_id} to start")

    first_pid = await pid_of(first)
    second_pid = await pid_of(second)
    assert (await api.request("POST", f"/runs/{first}/cancel")).status == 200
    run = await api.wait_run(first)
    assert run["state"] == "cancelled"
    assert nodes_of(run)["wait"]["error"]["type"] == "NodeCancelled"
    await async_wait_for(
        lambda: not alive(first_pid), timeout=10, what="the cancelled node's process to end"
    )
    assert alive(second_pid)
    assert (await api.run(second))["state"] == "running"
    # Answered at once, the run is still running while its process is stopped; with
    # ?wait= the answer is the run once it has ended cancelled.
    waited = await api.request("POST", f"/runs/{second}/cancel?wait=20")
    assert waited.status == 200 and waited.body["state"] == "cancelled", waited.body
    assert nodes_of(waited.body)["wait"]["error"]["type"] == "NodeCancelled"
    again = await api.request("POST", f"/runs/{second}/cancel")
    assert again.status == 409 and "already ended" in again.body["detail"]


async def test_silence_timeout_stops_a_quiet_node(api: InProcessEngine) -> None:
    hang = {
        "id": "hang",
        "timeout": 0.5,
        "code": "import time\ndef process():\n    time.sleep(60)\n",
    }
    await api.put_flow("quiet", [hang])
    run = await api.wait_run((await api.start_run("quiet"))["id"])
    error = nodes_of(run)["hang"]["error"]
    assert error["type"] == "NodeTimeout" and "0.5 s" in error["message"]


async def test_a_limit_stops_a_node_that_keeps_reporting(api: InProcessEngine) -> None:
    chatty = {
        "id": "chatty",
        "timeout": 1,
        "limit": 1.5,
        "code": code("""
            import time
            def process():
                while True:
                    print("still busy", flush=True)
                    time.sleep(0.1)
        """),
    }
    await api.put_flow("chatty", [chatty])
    run = await api.wait_run((await api.start_run("chatty"))["id"])
    node = nodes_of(run)["chatty"]
    assert node["state"] == "failed"
    assert node["error"]["type"] == "NodeLimit"
    assert node["error"]["message"] == "ran for 1.5 s, its limit, and was stopped"
    assert "still busy" in node["logs"], "it reported all along: no silence timeout"


async def test_queued_with_the_schedulers_reason_and_prefer_runs_on_the_engine(
    api: InProcessEngine,
) -> None:
    train = {"id": "train", "code": "def process():\n    return 1\n", "worker": "gpu"}
    await api.put_flow("gpu", [train])
    await api.put_flow("gpu-prefer", [{**train, "worker_policy": "prefer"}])
    queued = await api.start_run("gpu")
    assert queued["state"] == "queued"
    assert queued["reason"] == "no attached worker carries label 'gpu'"
    run = await api.wait_run((await api.start_run("gpu-prefer"))["id"])
    assert nodes_of(run)["train"]["ran_on"] == "engine"
    listed = (await api.request("GET", "/runs?flow=gpu&state=queued")).body
    assert [r["id"] for r in listed] == [queued["id"]]
    bad = await api.request("GET", "/runs?state=sleeping")
    assert bad.status == 422 and bad.body["field"] == "state"
    assert (await api.request("GET", "/runs/nope")).status == 404


async def test_each_call_records_the_worker_host_job_and_gpus_it_ran_on(
    api: InProcessEngine,
) -> None:
    token = await api.mint("gpu-box", ["gpu"])
    worker = await api.attach(
        token, name="n17", labels=["gpu"], gpus=2, host="n17.cluster", slurm_job_id="41"
    )
    code = "def process():\n    return 1\n"
    node = {"id": "train", "worker": "gpu", "resources": {"gpus": 1}, "code": code}
    assert (await api.put_flow("where", [node])).status in (200, 201)
    run = await api.start_run("where")
    call = await worker.next_call()
    assert call["env"]["CUDA_VISIBLE_DEVICES"] == "0"
    await worker.answer(call["call_id"], 1)
    (ran,) = (await api.wait_run(run["id"]))["nodes"]
    assert ran["ran_on"] == "gpu-box/n17"
    assert ran["provenance"] == {
        "worker": "gpu-box/n17",
        "host": "n17.cluster",
        "slurm_job_id": "41",
        "batch_job": None,
        "gpu_ids": [0],
        "provisioner": None,
        "request_id": None,
        "cached_bytes": 0,
    }


def test_provenance_is_stored_whole_and_read_back_the_same() -> None:
    full = Provenance(
        worker="gpu-box",
        host="n1",
        slurm_job_id="41",
        batch_job="Slurm job 41",
        gpu_ids=(0, 1),
        provisioner="hpc/gpu",
        request_id="r1",
        cached_bytes=5 << 30,
    )
    stored = json.loads(json.dumps(full.to_json()))
    assert set(stored) == {f.name for f in dataclasses.fields(Provenance)}, "no field is lost"
    assert Provenance.from_json(stored) == full


async def test_a_secret_a_node_prints_emits_raises_or_returns_is_redacted_before_it_is_stored(
    api: InProcessEngine,
) -> None:
    value = "s3cr3t-value-for-the-db"
    answer = await api.request("PUT", "/secrets/db", json_body={"value": value, "labels": []})
    assert answer.status == 200
    leaky = code("""
        import fluksio
        def process(password, fail=False):
            print("connecting with", password)
            fluksio.emit(dsn=f"postgres://app:{password}@db/app", nested=[{"p": password}])
            if fail:
                raise RuntimeError(f"login failed for {password}")
            return {"length": len(password), "dsn": f"app:{password}@db", password: 1}
    """)
    downstream = "def process(leak):\n    return leak['dsn']\n"
    params = {"password": {"$secret": "db"}}
    nodes: list[dict[str, Any]] = [
        {"id": "leak", "code": leaky, "params": params},
        {"id": "fails", "code": leaky, "params": {**params, "fail": True}},
        {"id": "after", "code": downstream, "after": ["leak"]},
    ]
    await api.put_flow("leaky", nodes)
    run = await api.wait_run((await api.start_run("leaky"))["id"])
    by_id = nodes_of(run)
    assert by_id["leak"]["result"] == {
        "length": len(value),  # the call itself had the real value
        "dsn": "app:[redacted]@db",
        "[redacted]": 1,
    }
    assert by_id["after"]["result"] == "app:[redacted]@db", "downstream gets what was stored"
    assert "connecting with [redacted]" in by_id["leak"]["logs"]
    assert by_id["leak"]["events"][0]["outputs"] == {
        "dsn": "postgres://app:[redacted]@db/app",
        "nested": [{"p": "[redacted]"}],
    }
    assert by_id["fails"]["error"]["message"] == "login failed for [redacted]"
    stored = (await api.request("GET", f"/runs/{run['id']}")).body
    assert value not in json.dumps(stored)


# -- what a node sees --------------------------------------------------------------------


@pytest.mark.process
def test_thread_caps_and_no_credentials_in_the_node(tmp_path: Path) -> None:
    env = engine_env(DEPLOY_API_TOKEN="must-not-leak", PLAIN_SETTING="ok")
    engine = start_engine(tmp_path / "data", tmp_path / "logs", env=env)
    try:
        token = engine.login()
        put_flow(
            engine,
            token,
            "env",
            [
                {
                    "id": "look",
                    "resources": {"cpus": 1},
                    "code": code("""
            import os
            def process():
                names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "CUDA_VISIBLE_DEVICES", "DEPLOY_API_TOKEN", "PLAIN_SETTING",
                         "FLUKSIO_SUPERUSER_PASSWORD")
                return {name: os.environ.get(name) for name in names}
        """),
                }
            ],
        )
        run = wait_run(engine, token, start_run(engine, token, "env")["id"])
        assert nodes_of(run)["look"]["result"] == {
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",
            "DEPLOY_API_TOKEN": None,
            "PLAIN_SETTING": "ok",
            "FLUKSIO_SUPERUSER_PASSWORD": None,
        }
    finally:
        engine.stop()


def test_secrets_reach_the_node_only_as_the_params_it_asked_for(engine: EngineProcess) -> None:
    token = engine.login()
    value = "s3cr3t-value-for-the-db"
    answer = engine.client(token).request(
        "PUT", "/secrets/db_password", json_body={"value": value, "labels": ["db"]}
    )
    assert answer.status == 200 and "value" not in answer.body
    listed = engine.client(token).request("GET", "/secrets").body
    assert [(s["name"], s["labels"]) for s in listed] == [("db_password", ["db"])]
    put_flow(
        engine,
        token,
        "uses-secret",
        [
            {
                "id": "connect",
                "params": {"password": {"$secret": "db_password"}},
                "code": "def process(password):\n    return len(password)\n",
            },
            {
                "id": "missing",
                "params": {"password": {"$secret": "nope"}},
                "code": "def process(password):\n    return 1\n",
            },
        ],
    )
    run = wait_run(engine, token, start_run(engine, token, "uses-secret")["id"])
    by_id = nodes_of(run)
    assert by_id["connect"]["result"] == len(value)
    assert by_id["missing"]["error"]["type"] == "SecretDenied"
    assert "'nope' does not exist" in by_id["missing"]["error"]["message"]
    record = engine.client(token).request("GET", f"/runs/{run['id']}")
    flow = engine.client(token).request("GET", "/flows/uses-secret")
    assert value not in str(record.body) and value not in str(flow.body)
    engine.stop()
    assert value not in engine.logs()
    database = (engine.data_dir / "fluksio.sqlite3").read_bytes()
    assert value.encode() not in database, "stored encrypted"
