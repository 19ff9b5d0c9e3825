"""A call's memory as the kernel counts it (issue 65, item 5): pages its processes share
count once (a loader's readers forked after it touched its data), and what it holds out
of its processes' own pages counts too (a shared ``mmap``, files it leaves in
``/dev/shm``). Real launcher, real processes; ``ram_mb`` as a node sets it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from fluksio.agent.launcher import Launcher
from tests.support.launching import launcher, run

pytestmark = pytest.mark.process
__all__ = ["launcher"]  # the fixture, used by name

READERS = """
    import os, time
    def process(mb):
        data = bytearray(mb << 20)
        for at in range(0, len(data), 4096):
            data[at] = 1  # touched: resident, then shared by the readers below
        readers = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:  # a reader, as multiprocessing's or a data loader's: reads only
                total = sum(data[at] for at in range(0, len(data), 4096))
                time.sleep(1.5)
                os._exit(0 if total else 1)
            readers.append(pid)
        return [os.waitpid(pid, 0)[1] for pid in readers]
"""

SHARED_MMAP = """
    import mmap, time
    def process(mb):
        held = mmap.mmap(-1, mb << 20)  # shared and anonymous
        for at in range(0, mb << 20, 4096):
            held[at] = 1
        time.sleep(2)
        return "kept"
"""

WAITS_FOR = """
    import os, time
    def process(path):
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # its watchdog reads its memory meanwhile, the other file there
        return os.path.exists(path)
"""

IN_SHM = """
    import time
    def process(mb, path):
        with open(path, "wb") as out:  # written over a second, as a producer does
            for _ in range(mb):
                out.write(b"x" * (1 << 20))
                time.sleep(1 / mb)
        time.sleep(2)
        return "kept"
"""


async def test_pages_its_readers_share_count_once(launcher: Launcher) -> None:
    # Before: 4 x 120 MB counted, and the call failed NodeOutOfMemory under 300 MB.
    outcome, _ = await asyncio.wait_for(run(launcher, READERS, kwargs={"mb": 120}, ram_mb=300), 60)
    assert outcome.ok and outcome.result == [0, 0, 0], outcome


async def test_a_shared_mmap_counts(launcher: Launcher) -> None:
    # Before: shared pages were taken for a file's and left out: it ran on, over its bound.
    outcome, _ = await asyncio.wait_for(
        run(launcher, SHARED_MMAP, kwargs={"mb": 300}, ram_mb=150), 60
    )
    assert (outcome.error or {}).get("type") == "NodeOutOfMemory", outcome


async def test_what_it_leaves_in_dev_shm_counts(launcher: Launcher) -> None:
    path = Path("/dev/shm") / f"fluksio-test-{os.getpid()}"  # noqa: S108 (the point)
    try:
        outcome, _ = await asyncio.wait_for(
            run(launcher, IN_SHM, kwargs={"mb": 250, "path": str(path)}, ram_mb=120), 60
        )
    finally:
        path.unlink(missing_ok=True)
    assert (outcome.error or {}).get("type") == "NodeOutOfMemory", outcome
    assert "over its ram_mb of 120 MB" in outcome.error["message"]


async def test_a_file_another_process_leaves_in_dev_shm_is_not_the_calls(
    launcher: Launcher,
) -> None:
    """Before: any file of the same user changed in /dev/shm since the call began was
    counted as the call's: another call's (or another worker's, or another test's) 250 MB
    failed this one ``NodeOutOfMemory``. Now only what its own processes opened counts."""
    path = Path("/dev/shm") / f"fluksio-test-other-{os.getpid()}"  # noqa: S108 (the point)
    written = path.with_name(path.name + "-written")
    call = run(launcher, WAITS_FOR, kwargs={"path": str(written)}, ram_mb=150)
    running = asyncio.create_task(call)
    try:
        with open(path, "wb") as out:  # by this test's process, not the call's
            for _ in range(250):
                out.write(b"x" * (1 << 20))
        written.touch()  # the call waits for it: the file is whole while it is read
        outcome, _ = await asyncio.wait_for(running, 60)
    finally:
        path.unlink(missing_ok=True)
        written.unlink(missing_ok=True)
    assert outcome.ok and outcome.result is True, outcome.error
