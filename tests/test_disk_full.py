"""The data directory's disk fills up: every write is a 507 with a sentence, nothing is
half-written, reads go on, and the engine carries on by itself once there is room.

A real full disk: the data directory is a small tmpfs (root only; CI runs as root), filled
by a file until the kernel says ENOSPC.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.engine.runs.store import RunStore
from tests.support.inprocess import ClientFactory, start_in_process
from tests.support.runs import code
from tests.support.wait import async_wait_for, poll_async


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs as root: it must mount a small tmpfs to fill a disk")
        pytest.skip("filling a disk for real needs a tmpfs mount, as root")
    data = tmp_path / "data"
    data.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(data)]
    )
    assert mounted.returncode == 0
    try:
        yield data
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def _fill(directory: Path) -> Path:
    """Write a file until the disk has no room left, to the last byte; the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


BIG = "def process():\n    return 1\n" + "# padding\n" * 40_000


async def test_a_full_disk_refuses_writes_in_a_sentence_and_the_engine_recovers_by_itself(
    aiohttp_client: ClientFactory, small_disk: Path, tmp_path: Path
) -> None:
    api = await start_in_process(aiohttp_client, small_disk)
    gate = tmp_path / "gate"
    waits = code(f"""
        import os, time
        def process():
            while not os.path.exists({str(gate)!r}):
                time.sleep(0.05)
            return "through"
    """)
    assert (await api.put_flow("big", [{"id": "n", "code": BIG}])).status == 201
    assert (await api.put_flow("gated", [{"id": "n", "code": waits}])).status == 201
    running = await api.start_run("gated")
    filler = _fill(small_disk)

    # Writes: each refused whole, saying why; pad until SQLite's own slack is used too.
    for index in range(50):
        answer = await api.put_flow(f"pad{index}", [{"id": "n", "code": BIG}])
        if answer.status == 507:
            break
        assert answer.status == 201, answer
    assert answer.status == 507, "the disk filled up"
    assert "its disk is full; nothing of this change was kept" in answer.body["detail"]
    assert (await api.request("GET", f"/flows/pad{index}")).status == 404, "nothing half-saved"
    refused = await api.request("POST", "/flows/big/runs", json_body={"params": {}})
    assert refused.status == 507, refused
    assert "disk is full" in refused.body["detail"]
    # Reads go on.
    assert (await api.request("GET", "/flows")).status == 200
    assert (await api.request("GET", f"/runs/{running['id']}")).status == 200
    runs_before = (await api.request("GET", "/runs?flow=big")).body
    assert runs_before == [], "the refused run left nothing"

    # The run in flight finishes meanwhile; the API says so at once.
    gate.touch()

    async def ended() -> dict[str, object] | None:
        run = (await api.request("GET", f"/runs/{running['id']}")).body
        return run if run["state"] == "succeeded" else None

    await poll_async(ended, timeout=20, what="the gated run to end")

    # Room again: nothing to restart. What waited in memory is written, writes work.
    filler.unlink()
    store = RunStore(api.database)

    def stored_state() -> str | None:
        found = store.get(running["id"])
        return str(found[0].state) if found else None

    await async_wait_for(
        lambda: stored_state() == "succeeded", timeout=10, what="the run's end to be written"
    )
    assert (await api.put_flow("after", [{"id": "n", "code": BIG}])).status == 201
    again = await api.start_run("big")
    assert (await api.wait_run(again["id"]))["state"] == "succeeded"
