"""Retries the node's author chooses: which failures, how many times, after what wait.

In the test's process, on a clock the test moves: the back-off passes in no real time,
and the calls still run in real processes on the engine (or on a scripted worker).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fluksio.agent.protocol.frames import AnswerFrame, ErrorRecord, encode
from fluksio.agent.protocol.outcome import ErrorKind
from fluksio.cli.runs import render_run
from fluksio.engine.runs.machine.retries import failure_kind
from fluksio.wire.answers.runs import RunBody
from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.wait import advance_until, async_wait_for, poll_async

FAILS_TWICE = """
import os

def process(counter):
    done = int(open(counter).read()) if os.path.exists(counter) else 0
    with open(counter, "w") as handle:
        handle.write(str(done + 1))
    if done < 2:
        raise ValueError(f"attempt {done + 1} fails")
    return done + 1
"""


async def _engine(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> tuple[InProcessEngine, ManualClock]:
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, tmp_path / "data", clock=clock)
    return api, clock


async def _node(api: InProcessEngine, run_id: str) -> dict[str, Any]:
    node: dict[str, Any] = nodes_of(await api.run(run_id))["flaky"]
    return node


async def test_a_chosen_failure_is_retried_after_a_growing_back_off_until_it_succeeds(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await _engine(aiohttp_client, tmp_path)
    retry = {"on": ["NodeError"], "times": 3, "backoff_s": 10, "factor": 3}
    counter = str(tmp_path / "counter")
    node = {"id": "flaky", "code": FAILS_TWICE, "params": {"counter": counter}, "retry": retry}
    await api.put_flow("flaky", [node])
    run_id = (await api.start_run("flaky"))["id"]

    async def waiting_to_retry(attempt: int) -> dict[str, Any] | None:
        found = await _node(api, run_id)
        return found if found["state"] == "pending" and found["attempt"] == attempt else None

    first = await poll_async(lambda: waiting_to_retry(2), timeout=20, what="the first failure")
    assert first["reason"] == (
        "attempt 2 of 4 in 10 s; attempt 1 ended ValueError: attempt 1 fails"
    ), first
    assert first["error"]["type"] == "ValueError", "the last attempt's error, while it waits"
    assert (first["attempt"], first["attempts"]) == (2, 4)
    (retried,) = first["events"]
    assert retried["event"] == "retried"
    assert retried["outputs"] == {
        "after": "ValueError: attempt 1 fails",
        "attempt": 2,
        "of": 4,
        "in_s": 10,
    }
    # Nothing starts before the back-off is over.
    clock.advance(9)
    assert (await _node(api, run_id))["state"] == "pending"
    assert Path(counter).read_text() == "1"
    clock.advance(1.5)
    second = await poll_async(lambda: waiting_to_retry(3), timeout=20, what="the second failure")
    assert second["reason"].startswith("attempt 3 of 4 in 30 s;"), "10 s, then 3 times that"
    await advance_until(
        clock,
        5,
        lambda: _ended(api, run_id),
        timeout=20,
        what="the third attempt to succeed",
    )
    run = await api.run(run_id)
    done = nodes_of(run)["flaky"]
    assert (done["state"], done["result"], done["attempt"]) == ("succeeded", 3, 3)
    assert done["error"] is None, "the earlier attempts' errors are in its events"
    assert [e["outputs"]["attempt"] for e in done["events"]] == [2, 3]
    # What fluksio runs show prints under the node.
    shown = "\n".join(render_run(RunBody.model_validate(run)))
    assert "attempt 3 of 4 (attempt 2 ended ValueError: attempt 2 fails)" in shown, shown


async def _ended(api: InProcessEngine, run_id: str) -> dict[str, Any] | None:
    run: dict[str, Any] = await api.run(run_id)
    return run if run["state"] in ("succeeded", "failed", "cancelled") else None


async def test_a_failure_not_chosen_and_the_last_attempt_fail_the_node(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, _clock = await _engine(aiohttp_client, tmp_path)
    counter = str(tmp_path / "counter")
    params = {"counter": counter}
    nodes: list[dict[str, Any]] = [
        {
            "id": "flaky",
            "code": FAILS_TWICE,
            "params": params,
            "retry": {"on": ["NodeTimeout"], "times": 3},
        },
    ]
    await api.put_flow("other", nodes)
    run = await api.wait_run((await api.start_run("other"))["id"])
    (node,) = run["nodes"]
    assert (node["state"], node["attempt"], node["error"]["type"]) == ("failed", 1, "ValueError")
    # Too few attempts: the last one's error is the node's.
    Path(counter).unlink()
    retry = {"on": ["NodeError"], "times": 1, "backoff_s": 0}
    await api.put_flow("short", [{**nodes[0], "retry": retry}])
    run = await api.wait_run((await api.start_run("short"))["id"])
    (node,) = run["nodes"]
    assert (node["state"], node["attempt"]) == ("failed", 2)
    assert node["error"]["message"] == "attempt 2 fails"


async def test_cancel_during_the_back_off_stops_the_retries(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await _engine(aiohttp_client, tmp_path)
    counter = str(tmp_path / "counter")
    retry = {"on": ["NodeError"], "times": 5, "backoff_s": 60}
    await api.put_flow(
        "flaky",
        [{"id": "flaky", "code": FAILS_TWICE, "params": {"counter": counter}, "retry": retry}],
    )
    run_id = (await api.start_run("flaky"))["id"]

    async def backing_off() -> bool | None:
        return (await _node(api, run_id))["state"] == "pending" or None

    await poll_async(backing_off, timeout=20, what="the first failure")
    clock.advance(30)  # half its back-off
    cancelled = await api.request("POST", f"/runs/{run_id}/cancel")
    assert cancelled.status == 200 and cancelled.body["state"] == "cancelled"
    clock.advance(600)
    run = await api.wait_run(run_id)
    node = nodes_of(run)["flaky"]
    assert node["state"] == "cancelled"
    assert Path(counter).read_text() == "1", "it never ran again"
    # Attempt 2 never started: the node shows the attempt that ran, and its duration.
    assert node["attempt"] == 1 and node["duration_s"] < 30, node
    shown = "\n".join(render_run(RunBody.model_validate(run)))
    assert "attempt 2" not in shown, shown


async def test_a_lost_worker_is_retried_on_another_worker_after_the_back_off(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, clock = await _engine(aiohttp_client, tmp_path)
    retry = {"on": ["WorkerGone", "NodeLimit"], "times": 2, "backoff_s": 5}
    await api.put_flow(
        "far",
        [
            {
                "id": "flaky",
                "code": "def process():\n    return 1\n",
                "worker": "cpu",
                "retry": retry,
            }
        ],
    )
    first = await api.attach(await api.mint("first", ["cpu"]), name="first", labels=["cpu"])
    run_id = (await api.start_run("far"))["id"]
    lost = await first.next_call()
    await first.close()
    second = await api.attach(await api.mint("second", ["cpu"]), name="second", labels=["cpu"])

    async def pending() -> dict[str, Any] | None:
        node = await _node(api, run_id)
        return node if node["state"] == "pending" else None

    waiting = await poll_async(pending, timeout=10, what="the lost call to wait for its retry")
    assert waiting["error"]["type"] == "WorkerGone"
    assert second.calls == {}, "not before the back-off is over"
    clock.advance(5)
    again = await second.next_call()
    assert again["call_id"] != lost["call_id"]
    # Our agent stops a call at its limit and says so: a chosen kind, retried once more.
    limit = AnswerFrame(
        call_id=again["call_id"],
        ok=False,
        error=ErrorRecord(type="NodeLimit", message="ran for 1 s"),
    )
    await second.send_raw(encode(limit))
    await poll_async(pending, timeout=10, what="the limited call to wait for its retry")
    clock.advance(10)

    def third() -> str | None:
        return next((i for i in second.calls if i not in (lost["call_id"], again["call_id"])), None)

    last = await async_wait_for(third, timeout=10, what="the third attempt")
    await second.answer(last, "third time")
    done = nodes_of(await api.wait_run(run_id))["flaky"]
    assert (done["state"], done["result"], done["attempt"]) == ("succeeded", "third time", 3)


async def test_retry_and_retries_together_are_refused_naming_the_field(
    api: InProcessEngine,
) -> None:
    node = {"id": "n", "code": "def process():\n    return 1\n", "retries": 2}
    both = await api.request(
        "PUT",
        "/flows/both",
        json_body={"nodes": [{**node, "retry": {"on": ["NodeError"], "times": 1}}]},
    )
    assert both.status == 422
    assert both.body["detail"].startswith(
        'nodes.0.retry: Value error, give "retry" or "retries", not both ("retries": 2 is'
    )
    bad = await api.request(
        "PUT",
        "/flows/bad",
        json_body={
            "nodes": [{"id": "n", "code": node["code"], "retry": {"on": ["Flaky"], "times": 1}}]
        },
    )
    assert bad.status == 422 and bad.body["detail"].startswith("nodes.0.retry.on.0"), bad.body


async def test_a_call_stopped_at_its_jobs_end_runs_again_in_another_job_spending_no_retry(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    """A node without a limit runs until its job has the margin left; that stop is not its
    doing, so it runs again though it has no retries, in another job, since the one it
    ended in is inside its margin now."""
    api, clock = await _engine(aiohttp_client, tmp_path)
    now = clock.now()
    node = {"id": "flaky", "code": "def process():\n    return 1\n", "worker": "hpc"}
    await api.put_flow("long", [node])
    ending = await api.attach(
        await api.mint("a", ["hpc"]), name="a", labels=["hpc"], slurm_job_id="7", ends_at=now + 70
    )
    run_id = (await api.start_run("long"))["id"]
    first = await ending.next_call()
    assert 9 <= first["limit"] <= 10, "its job's end less the 60-s margin"
    lasting = await api.attach(
        await api.mint("b", ["hpc"]), name="b", labels=["hpc"], slurm_job_id="8", ends_at=now + 3600
    )
    clock.advance(10)  # job 7 now has 60 s left: its margin
    stopped = AnswerFrame(
        call_id=first["call_id"], ok=False, error=ErrorRecord(type="NodeLimit", message="x")
    )
    await ending.send_raw(encode(stopped))
    again = await lasting.next_call()
    assert "limit" not in again or again["limit"] > 3000
    await lasting.answer(again["call_id"], "in job 8")
    done = nodes_of(await api.wait_run(run_id))["flaky"]
    assert (done["state"], done["result"], done["attempt"]) == ("succeeded", "in job 8", 2)
    assert done["events"][0]["event"] == "interrupted"
    assert done["events"][0]["outputs"]["after"] == (
        'NodeLimit: ran until Slurm job 7 had 60 s left; give the node a "limit" to be placed'
        " where it fits"
    )
    assert list(ending.calls) == [first["call_id"]], "never again in the job it ended in"


async def test_a_retried_failure_shows_no_secret_while_it_waits(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api, _clock = await _engine(aiohttp_client, tmp_path)
    secret = {"value": "hunter2-the-long-one", "labels": []}
    assert (await api.request("PUT", "/secrets/tok", json_body=secret)).status == 200
    leaks = "def process(token):\n    raise ValueError(f'bad token {token}')\n"
    retry = {"on": ["NodeError"], "times": 1, "backoff_s": 60}
    node = {"id": "flaky", "code": leaks, "params": {"token": {"$secret": "tok"}}, "retry": retry}
    await api.put_flow("leaky", [node])
    run_id = (await api.start_run("leaky"))["id"]

    async def waiting() -> dict[str, Any] | None:
        found = await _node(api, run_id)
        return found if found["state"] == "pending" and found["error"] else None

    shown = await poll_async(waiting, timeout=20, what="the first attempt to fail")
    assert shown["error"]["message"] == "bad token [redacted]"
    assert shown["events"][0]["outputs"]["after"] == "ValueError: bad token [redacted]"
    assert "hunter2" not in str(shown)


def test_only_the_kinds_named_as_the_nodes_failures_are_retried_a_new_kind_is_not() -> None:
    # Before, a deny-list: any kind the engine gave that nobody had listed (a new one) was
    # retried as a NodeError, re-running a node for the engine's own trouble.
    retried = {kind: failure_kind(kind) for kind in ErrorKind if failure_kind(kind)}
    assert retried == {
        ErrorKind.NODE_TIMEOUT: "NodeTimeout",
        ErrorKind.NODE_LIMIT: "NodeLimit",
        ErrorKind.WORKER_GONE: "WorkerGone",
        ErrorKind.REMOTE_ERROR: "NodeError",
        ErrorKind.NODE_OUT_OF_MEMORY: "NodeError",  # it held more than it asked for
        ErrorKind.INTERRUPTED: "WorkerGone",  # its worker stopped, past max_checkpoints
    }
    assert failure_kind(ErrorKind.NODE_CRASHED_WORKERS) is None, "not sent anywhere else"
    assert failure_kind("ValueError") == "NodeError"  # the node's own exception
    assert failure_kind(ErrorKind.ITEMS_FAILED) is None  # an array's items retry one by one
