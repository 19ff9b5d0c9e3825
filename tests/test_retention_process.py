"""Run history in bounds, with real processes: 2,000 runs, the older half deleted by age
while the newer half runs; nothing a kept run names is lost, and the database reuses the
pages deleted rows free.

The older half is aged as time would age it: their ends, and every stored object's time,
are written an hour back (in the engine's database, which SQLite lets a second
connection write), so the test does not wait an hour. The engine keeps runs 30 minutes
and looks every half second.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import time
from pathlib import Path

import pytest

from tests.support.client import SocketEngine
from tests.support.engine import start_engine
from tests.support.runs import code
from tests.support.wait import poll_async

SAVES = code(
    """
    import fluksio

    def process(n):
        if n % 10:  # one run in ten saves artifacts: the rest are rows only
            return {"n": n}
        own = fluksio.save_artifact(f"run {n}".encode(), name="own.txt")
        shared = fluksio.save_artifact(b"the same in every tenth run", name="shared.txt")
        return {"own": own, "shared": shared}
    """
)
pytestmark = pytest.mark.process

HOUR = 3600.0


def _object(data_dir: Path, content: bytes) -> Path:
    hex_digest = hashlib.sha256(content).hexdigest()
    return data_dir / "artifacts" / "sha256" / hex_digest[:2] / hex_digest


async def _start_all(api: SocketEngine, numbers: range) -> list[str]:
    ids: list[str] = []
    for chunk in range(numbers.start, numbers.stop, 50):
        batch = range(chunk, min(chunk + 50, numbers.stop))
        runs = await asyncio.gather(*(api.start_run("saves", n=n) for n in batch))
        ids += [run["id"] for run in runs]
    return ids


async def _all_ended(api: SocketEngine) -> None:
    """Every run started has ended, and none failed (asked with small queries, four times
    a second, so that the asking does not slow the engine down)."""

    async def ended() -> bool:
        for state in ("queued", "running"):
            if (await api.request("GET", f"/runs?state={state}&limit=1")).body:
                return False
        return True

    await poll_async(ended, timeout=240, what="the runs to end", interval=0.25)
    assert (await api.request("GET", "/runs?state=failed&limit=1")).body == []


def _pages(database: Path) -> tuple[int, int]:
    with sqlite3.connect(database, timeout=30) as connection:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
    return int(pages), int(free)


async def test_half_of_2000_runs_deleted_by_age_while_the_rest_run_loses_nothing_kept(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    args = ("--keep-runs-s", "1800", "--prune-every-s", "0.5")
    engine = start_engine(data_dir, tmp_path / "logs", args=args)
    try:
        async with SocketEngine(engine.url) as api:
            api.token = await api.login()
            assert (await api.put_flow("saves", [{"id": "n", "code": SAVES}])).status == 201
            old = await _start_all(api, range(1000))
            await _all_ended(api)
            database = data_dir / "fluksio.sqlite3"
            with sqlite3.connect(database, timeout=30) as connection:
                connection.execute(
                    "UPDATE runs SET created_at = created_at - ?, started_at = started_at - ?,"
                    " ended_at = ended_at - ?",
                    (HOUR, HOUR, HOUR),
                )
            aged = time.time() - HOUR
            for entry in (data_dir / "artifacts" / "sha256").glob("*/*"):
                os.utime(entry, (aged, aged))
            # The newer half runs while the older half goes; it saves runs 500-999's
            # content again, which must outlive the runs that saved it first.
            new = await _start_all(api, range(500, 1500))
            await _all_ended(api)

            async def old_gone() -> bool:
                listed = (await api.request("GET", "/runs?limit=1000")).body
                return {r["id"] for r in listed} == set(new)

            await poll_async(old_gone, timeout=60, what="the older runs to go", interval=0.25)
            for run_id in old[::50]:
                assert (await api.request("GET", f"/runs/{run_id}")).status == 404
            for run_id in new:
                result = (await api.run(run_id))["nodes"][0]["result"]
                for ref in (result["own"], result["shared"]) if "own" in result else ():
                    hex_digest = ref["digest"].removeprefix("sha256:")
                    stored = data_dir / "artifacts" / "sha256" / hex_digest[:2] / hex_digest
                    assert stored.exists(), f"run {run_id} names {ref['digest']}: gone"

            async def swept() -> bool:
                return not any(
                    _object(data_dir, f"run {n}".encode()).exists() for n in range(0, 500, 10)
                )

            await poll_async(swept, timeout=60, what="what only old runs named to go")
            # The pages deleted rows free are written again, not added to the file.
            for run_id in new[:400]:
                assert (await api.request("DELETE", f"/runs/{run_id}")).status == 200
            pages, free = _pages(database)
            assert free > 0, "deleting freed pages"
            await _start_all(api, range(1500, 1700))
            await _all_ended(api)
            again, still_free = _pages(database)
            assert (again, still_free < free) == (pages, True), (pages, free, again, still_free)
    finally:
        engine.stop()
