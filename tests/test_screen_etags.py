"""The Workers screen's three answers carry an ETag; ``304`` only while nothing changed.

What is checked is what the screen relies on: an unchanged view is answered ``304`` with
no body, every change a user would see gives a new tag, and a ``304`` never hides one
(heartbeats aside, which move only ``last_seen``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.support.clock import ManualClock
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.runs import nodes_of
from tests.support.wait import advance_until, poll_async

NODE = "def process():\n    return 1\n"


class Screen:
    """Polls like the page: each GET sends the tag of the last answer to that path."""

    def __init__(self, api: InProcessEngine) -> None:
        self.api = api
        self.kept: dict[str, tuple[str, Any]] = {}

    async def _get(self, path: str, tag: str | None = None) -> tuple[int, str | None, bytes]:
        headers = {"Authorization": f"Bearer {self.api.token}"}
        if tag is not None:
            headers["If-None-Match"] = tag
        async with self.api.client.get(f"/api/v1{path}", headers=headers) as answer:
            return answer.status, answer.headers.get("ETag"), await answer.read()

    async def poll(self, path: str) -> tuple[bool, Any]:
        """(changed, the view): what the page shows after one poll of ``path``."""
        kept = self.kept.get(path)
        status, tag, body = await self._get(path, kept[0] if kept else None)
        status_fresh, _tag, fresh_body = await self._get(path)
        assert status_fresh == 200
        fresh = json.loads(fresh_body)
        if status == 304:
            assert kept is not None and body == b"" and tag == kept[0]
            assert _without_heartbeats(fresh) == _without_heartbeats(kept[1]), (
                f"{path} answered 304 over a change"
            )
            return False, kept[1]
        assert status == 200 and tag, (status, tag)
        view = json.loads(body)
        self.kept[path] = (tag, view)
        return True, view


def _without_heartbeats(view: Any) -> Any:
    if isinstance(view, list):
        return [_without_heartbeats(item) for item in view]
    if isinstance(view, dict):
        return {k: _without_heartbeats(v) for k, v in view.items() if k != "last_seen"}
    return view


async def test_the_screen_gets_304_until_something_it_shows_changes(
    aiohttp_client: ClientFactory, tmp_path: Path
) -> None:
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, tmp_path / "data", clock=clock)
    screen = Screen(api)
    paths = ("/workers", "/workers/resources", "/workers/tokens")
    for path in paths:
        assert (await screen.poll(path))[0]
        assert not (await screen.poll(path))[0], f"{path} changed with nothing done"

    token = await api.mint("box", ["cpu"])
    assert [await screen.poll(path) for path in paths][2][0], "a minted token is a change"
    worker = await api.attach(token, name="box", labels=["cpu"], cpus=4)
    changed, workers = await screen.poll("/workers")
    assert changed and [w["name"] for w in workers] == ["box"]
    assert (await screen.poll("/workers/resources"))[0]
    first_seen = workers[0]["last_seen"]

    async def heard_again() -> bool:
        listed = (await api.request("GET", "/workers")).body
        return bool(listed[0]["last_seen"] != first_seen)

    await advance_until(clock, 5, heard_again, timeout=10, what="a pong from the worker")
    for path in paths:
        assert not (await screen.poll(path))[0], f"a heartbeat alone changed {path}"

    await api.put_flow("cpu", [{"id": "n", "code": NODE, "worker": "cpu"}])
    run = await api.start_run("cpu")
    call = await worker.next_call()
    changed, workers = await screen.poll("/workers")
    assert changed and workers[0]["in_flight"] == 1 and workers[0]["status"] == "busy"
    changed, resources = await screen.poll("/workers/resources")
    (place,) = [p for p in resources["places"] if p["name"] == "box"]
    assert changed and place["free"]["slots"] == 0
    await worker.answer(call["call_id"], 1)
    assert nodes_of(await api.wait_run(run["id"]))["n"]["state"] == "succeeded"
    changed, workers = await screen.poll("/workers")
    assert changed and workers[0]["in_flight"] == 0 and workers[0]["status"] == "idle"

    await api.put_flow("gpu", [{"id": "n", "code": NODE, "worker": "gpu"}])
    waiting = await api.start_run("gpu")
    changed, resources = await screen.poll("/workers/resources")
    assert changed and [q["run_id"] for q in resources["queued"]] == [waiting["id"]]
    answer = await api.request("POST", f"/runs/{waiting['id']}/cancel")
    assert answer.status in (200, 202), answer
    changed, resources = await screen.poll("/workers/resources")
    assert changed and resources["queued"] == []

    await worker.freeze()
    clock.advance(30)  # two pings unanswered

    async def status_is(status: str) -> bool:
        listed = (await api.request("GET", "/workers")).body
        return bool(listed[0]["status"] == status)

    await poll_async(lambda: status_is("not answering"), timeout=10, what="the worker to go quiet")
    changed, workers = await screen.poll("/workers")
    assert changed and workers[0]["status"] == "not answering"
    worker.thaw()
    await advance_until(
        clock, 2, lambda: status_is("idle"), timeout=10, what="the worker to answer again"
    )
    changed, workers = await screen.poll("/workers")
    assert changed and workers[0]["status"] == "idle"

    await worker.close()

    async def detached() -> bool:
        return bool((await screen.poll("/workers"))[1] == [])

    await poll_async(detached, timeout=10, what="the worker to leave the list")
    assert not (await screen.poll("/workers"))[0]
