"""``GET /events``: what a script or the Workers screen reads instead of polling.

Checked as a subscriber sees it: the events of a run on a worker, in order; a reconnect
with ``Last-Event-ID`` that misses nothing; a subscriber too far behind (or from before a
restart) told to refetch; the queue with its reasons; tokens without their text.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fluksio.engine.datadir import DataDir
from fluksio.engine.feed import LiveFeed
from fluksio.engine.key_places import KeyFiles
from fluksio.engine.keys import KeyRing
from fluksio.engine.users import UserStore
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.sse import Event, EventReader
from tests.support.wait import async_wait_for

NODE = "def process():\n    return 1\n"


@asynccontextmanager
async def feed(
    api: InProcessEngine, *, last_id: str | None = None, query: str = "", token: str = ""
) -> AsyncIterator[EventReader]:
    headers = {"Authorization": f"Bearer {token or api.token}"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    response = await api.client.get(f"/api/v1/events{query}", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    reader = EventReader(response)
    await reader.first("ready")
    try:
        yield reader
    finally:
        await reader.close()


def _numbers(events: list[Event]) -> list[int]:
    return [int(str(e.id).rpartition(".")[2]) for e in events if e.kind not in ("ready",)]


def _states(events: list[Event], kind: str) -> list[str]:
    return [e.data["state"] for e in events if e.kind == kind]


async def test_a_run_on_a_worker_is_told_as_it_happens(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    async with feed(api) as events:
        token = await api.mint("box", ["cpu"])
        minted = await events.first("token.minted")
        assert minted.data["token"]["name"] == "box"
        assert token not in str(minted.data), "the feed must never carry a token's text"

        worker = await api.attach(token, name="box", labels=["cpu"], cpus=4)
        attached = (await events.first("worker.attached")).data["worker"]
        assert attached["name"] == "box" and attached["inventory"]["cpus"] == 4
        assert attached["free"]["slots"] == 1

        await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
        run = await api.start_run("cpu")
        call = await worker.next_call()
        for step in range(3):
            await worker.emit(call["call_id"], {"step": step})
        progress = await events.first("call.progress", where=lambda d: d["events"] == 3)
        assert progress.data["run_id"] == run["id"] and progress.data["node"] == "n"
        told = [e.data["events"] for e in events.events if e.kind == "call.progress"]
        assert len(told) < 3, f"three quick events are told at once, not each: {told}"
        busy = await events.first("worker.changed", where=lambda d: d["worker"]["in_flight"] == 1)
        assert busy.data["worker"]["free"]["slots"] == 0
        await worker.answer(call["call_id"], 1)
        await events.first("run.state", where=lambda d: d["state"] == "succeeded")
        idle = await events.first(
            "worker.changed",
            where=lambda d: d["worker"]["in_flight"] == 0 and d["worker"]["free"]["slots"] == 1,
        )
        assert idle.data["worker"]["status"] == "idle"

        mine = [e for e in events.events if e.data and e.data.get("run_id") == run["id"]]
        assert _states(mine, "run.state") == ["queued", "running", "succeeded"]
        calls = [e.data for e in mine if e.kind == "call.state"]
        assert [c["state"] for c in calls] == ["queued", "running", "succeeded"]
        assert calls[-1]["place"] == "box" and calls[-1]["node"] == "n"

        # One record says both: a worker is never shown busy with its slots free.
        shown = [e.data["worker"] for e in events.events if e.kind.startswith("worker.")]
        for body in shown:
            slots_in_use = body["inventory"]["slots"] - body["free"]["slots"]
            assert body["in_flight"] == slots_in_use, body
            assert (body["status"] == "busy") == (body["in_flight"] > 0), body

        revoked = await api.request("POST", f"/workers/tokens/{attached['token']['jti']}/revoke")
        assert revoked.status == 200, revoked
        gone = await events.first("worker.gone")
        assert gone.data["id"] == attached["id"] and gone.data["name"] == "box"
        assert gone.data["reason"] == "the worker token was revoked"
        numbers = _numbers(events.events)
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), "a gap in ids"


async def test_a_reconnect_with_the_last_id_misses_nothing(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    await api.put_flow("here", [{"id": "n", "code": NODE}])
    async with feed(api) as events:
        first = await api.start_run("here")
        await events.first("run.state", where=lambda d: d["state"] == "succeeded")
        last_seen = events.events[-1].id
    # While nobody listens: two more runs, and a token.
    missed = [await api.start_run("here") for _ in range(2)]
    await api.wait_run(missed[-1]["id"])
    await api.mint("later", [])
    async with feed(api, last_id=last_seen) as events:
        await events.first("token.minted")
        assert events.kinds()[0] == "ready"
        replayed = events.events[1:]
        run_ids = [e.data["run_id"] for e in replayed if e.kind == "run.state"]
        assert first["id"] not in run_ids
        assert {r["id"] for r in missed} <= set(run_ids)
        numbers = _numbers(events.events)
        assert numbers[0] == int(str(last_seen).rpartition(".")[2]) + 1
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


async def test_a_subscriber_too_far_behind_or_from_before_a_restart_refetches(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", event_buffer=10)
    await api.put_flow("here", [{"id": "n", "code": NODE}])
    async with feed(api) as events:
        await api.start_run("here")
        await events.first("run.state", where=lambda d: d["state"] == "succeeded")
        early = events.events[0].id
    for _ in range(4):  # each run is five events: more than the ten kept
        await api.wait_run((await api.start_run("here"))["id"])
    for stale, why in ((early, "too far behind"), ("0badc0de.1", "restarted")):
        async with feed(api, last_id=stale) as events:
            assert events.kinds()[0] == "refetch", events.kinds()
            assert why in events.events[0].data["reason"]
            # ...and then it reads on from now.
            run_id = (await api.start_run("here"))["id"]
            await events.first(
                "run.state",
                where=lambda d: bool(d["run_id"] == run_id),  # noqa: B023 (awaited here)
            )

    for bad in ("nonsense", "abc.def"):
        answer = await api.client.get(
            "/api/v1/events",
            headers={"Authorization": f"Bearer {api.token}", "Last-Event-ID": bad},
        )
        assert answer.status == 422
        assert "Last-Event-ID" in (await answer.json())["detail"]


async def test_the_feed_needs_a_login_and_can_follow_one_run(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        answer = await api.client.get("/api/v1/events", headers=headers)
        assert answer.status == 401, answer.status
    await api.put_flow("here", [{"id": "n", "code": NODE}])
    await api.put_flow("gpu", [{"id": "n", "code": NODE, "worker": "gpu"}])
    waiting = await api.start_run("gpu")
    async with feed(api, query=f"?run={waiting['id']}") as events:
        other = await api.start_run("here")
        await api.wait_run(other["id"])
        await api.request("POST", f"/runs/{waiting['id']}/cancel")
        await events.first("run.state", where=lambda d: d["state"] == "cancelled")
        seen = {e.data.get("run_id") for e in events.events if e.kind != "ready"}
        assert seen == {waiting["id"]}
        assert api.engine.feed.subscribers == 1
    # A quiet stream whose subscriber left lets go within seconds, not at its next event.
    await async_wait_for(
        lambda: api.engine.feed.subscribers == 0, timeout=5, what="the stream to end"
    )


async def test_a_users_stream_carries_no_worker_token_a_user_may_not_list(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    users = UserStore(api.database)
    users.add("ann", "ann-password", is_superuser=False)
    ann = await api.login("ann", "ann-password")
    await api.put_flow("here", [{"id": "n", "code": NODE}])
    async with feed(api, token=ann) as theirs, feed(api) as ours:
        minted = await api.mint_token("box", ["cpu"])
        revoked = await api.request("POST", f"/workers/tokens/{minted['jti']}/revoke")
        assert revoked.status == 200, revoked
        await ours.first("token.revoked")
        run = await api.start_run("here")
        await theirs.first("run.state", where=lambda d: d["state"] == "succeeded")
        told = {e.kind for e in theirs.events}
        assert "token.minted" not in told and "token.revoked" not in told, told
        assert minted["jti"] not in str([e.data for e in theirs.events])
        assert run["id"] in str([e.data for e in theirs.events])
    # A superuser demoted while following gets no more of a superuser's events.
    users.add("bo", "bo-password-12", is_superuser=True)
    bo = await api.login("bo", "bo-password-12")
    async with feed(api, token=bo) as demoted:
        await api.mint_token("before", ["cpu"])
        await demoted.first("token.minted")
        users.set_superuser("bo", False)
        await api.mint_token("after", ["cpu"])
        await api.start_run("here")
        await demoted.first("run.state", where=lambda d: d["state"] == "succeeded")
        names = [e.data["token"]["name"] for e in demoted.events if e.kind == "token.minted"]
        assert names == ["before"], names


async def test_the_queue_is_told_with_why_each_call_waits(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    await api.put_flow("gpu", [{"id": "n", "code": NODE, "worker": "gpu"}])
    async with feed(api) as events:
        run = await api.start_run("gpu")

        def waiting(data: Any) -> bool:
            return [q["run_id"] for q in data["queued"]] == [run["id"]]

        queued = (await events.first("queue", where=waiting)).data["queued"][0]
        assert "gpu" in queued["reason"], queued
        await api.request("POST", f"/runs/{run['id']}/cancel")
        await events.first("queue", where=lambda d: d["queued"] == [])


async def test_a_stream_that_falls_behind_is_told_to_refetch_and_reads_on(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, tmp_path / "data", event_buffer=10)
    # Twelve nodes queued at once: thirteen events in one moment, more than are kept.
    nodes = [{"id": f"n{i}", "code": NODE} for i in range(12)]
    await api.put_flow("wide", nodes)
    async with feed(api) as events:
        run = await api.start_run("wide")
        lagged = await events.first("refetch")
        assert "lagged" in lagged.data["reason"]
        await events.first(
            "run.state", where=lambda d: d["run_id"] == run["id"] and d["state"] == "succeeded"
        )


async def test_a_stream_ends_within_seconds_once_its_key_is_rotated(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    # As `fluksio keys rotate` does beside a running engine: every token stops verifying,
    # and a stream opened before must not go on receiving events.
    api = await start_in_process(aiohttp_client, tmp_path / "data")
    async with feed(api) as events:
        rotated_at = time.monotonic()
        KeyRing(KeyFiles(DataDir(tmp_path / "data"))).rotate()
        closed = await events.first("closed")
        assert closed.data["reason"].startswith(
            "the token's signature does not match this engine's signing key"
        )
        assert time.monotonic() - rotated_at <= 10
        await events.until(lambda _events: events.ended, what="the stream's end")
    await async_wait_for(
        lambda: api.engine.feed.subscribers == 0, timeout=5, what="the stream to let go"
    )


def test_the_buffer_is_bounded_by_bytes_and_keeps_one_snapshot_of_each_view() -> None:
    feed = LiveFeed(capacity=10_000, max_bytes=2 << 20)
    queued = [
        {"call_id": f"c{i}", "reason": "provisioning box/small, " + "x" * 200} for i in range(400)
    ]
    for second in range(300):  # calls waiting on a failing provisioner, a view a second
        feed.publish("queue", {"queued": queued, "second": second}, view="queue")
        feed.publish("call.state", {"run_id": f"r{second}", "state": "queued"})
    one_view = len(feed.after(feed.seq - 2)[0].frame())
    assert one_view > 90_000
    assert feed.buffered_bytes < one_view + 300 * 200, "one queue view, not 300"
    assert len(feed.after(0)) == 600, "every event is still numbered, none lost"
    shown = [e for e in feed.after(0) if e.kind == "queue" and e.frame()]
    assert [e.seq for e in shown] == [feed.seq - 1], "only the newest snapshot is replayed"

    for index in range(100):  # big events that are no view: the byte budget holds
        feed.publish("worker.changed", {"worker": {"name": f"w{index}", "pad": "y" * 100_000}})
    assert feed.buffered_bytes <= 2 << 20
    assert feed.fell_behind(0), "a subscriber from the start is told to refetch"
    assert feed.position(f"{feed.epoch}.1").refetch is not None
