"""The agent's slots and what a waiting call's arguments name, in-process: calls taken
ahead start in the order they came, one dropped while it waits never starts, and a slot
handed to a call cancelled at that moment goes on to the next."""

from __future__ import annotations

import asyncio

from fluksio.agent.runner.artifacts import named_digests
from fluksio.agent.slots import Slots

A, B = "a" * 64, "b" * 64


async def test_calls_waiting_for_a_slot_start_in_the_order_they_came() -> None:
    slots = Slots(1)
    started: list[str] = []

    async def call(name: str) -> None:
        if await slots.take(name):
            started.append(name)

    assert await slots.take("running")
    waiting = [asyncio.create_task(call(name)) for name in ("first", "second", "third")]
    await asyncio.sleep(0)
    assert slots.full and slots.waiting == 3
    assert slots.drop("second")
    assert not slots.drop("never-taken")
    for _ in range(2):
        slots.give_back()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert started == ["first", "third"]
    slots.give_back()
    assert not slots.full


async def test_a_slot_handed_to_a_call_cancelled_at_that_moment_goes_to_the_next() -> None:
    slots = Slots(1)
    assert await slots.take("running")
    doomed = asyncio.create_task(slots.take("doomed"))
    after = asyncio.create_task(slots.take("after"))
    await asyncio.sleep(0)
    slots.give_back()  # to "doomed", which is cancelled before it can run
    doomed.cancel()
    assert await asyncio.wait_for(after, 5) is True
    assert doomed.cancelled()


def test_a_calls_arguments_name_artifacts_anywhere_once_each() -> None:
    ref = {"digest": f"sha256:{A}", "size": 3, "name": "w.bin"}
    kwargs = {
        "weights": ref,
        "batches": [{"digest": f"sha256:{B}"}, {"nested": {"again": ref}}],
        "not_a_ref": {"digest": "md5:abc"},
        "text": f"sha256:{A}",
    }
    assert named_digests(kwargs) == [A, B]
    assert named_digests({"n": 1, "s": "x"}) == []
