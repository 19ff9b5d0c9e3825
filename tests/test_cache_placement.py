"""Placement by what workers have cached, with real engine and agent processes.

Two workers carry the same label; best fit alone would send a call to the smaller one.
Once the larger has run a call that read a 2-MB input, its cache says so, and a call
reading that input goes to it, saying so in its provenance; a call reading nothing
still goes by best fit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluksio.client import Client
from tests.support.engine import EngineProcess
from tests.support.runs import code
from tests.support.wait import wait_for
from tests.support.worker import WorkerProcess, start_labelled_worker

pytestmark = pytest.mark.process

READS = code("""
    import fluksio

    def process(weights=None):
        if weights is None:
            return 0
        with open(fluksio.load_artifact(weights), "rb") as data:
            return len(data.read())
""")
MAKES = code("""
    import os
    import fluksio

    def process():
        return fluksio.save_artifact(os.urandom(2 << 20), name="made.bin")
""")
WITHIN_S = 60
LABEL = "cached-inputs"


def _worker(engine: EngineProcess, tmp_path: Path, name: str, cpus: int) -> WorkerProcess:
    return start_labelled_worker(
        engine,
        engine.login(),
        LABEL,
        tmp_path / name,
        "--name",
        name,
        "--cpus",
        str(cpus),
        "--artifact-transport",
        "http",  # as on another machine: a cache of its own
        token_name=f"{LABEL}-{name}",
        env={"FLUKSIO_ARTIFACT_CACHE": str(tmp_path / name / "cache")},
    )


def _reported(client: Client, name: str) -> int:
    for worker in client.workers():
        if getattr(worker, "name", "").endswith(f"/{name}"):
            return int(getattr(worker, "cached_artifacts", 0))
    return -1


def test_a_call_goes_to_the_worker_that_has_its_input_cached(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    client = Client(shared_engine.url, token=shared_engine.login())
    client.put_flow("reads", [{"id": "n", "code": READS, "worker": LABEL}])
    weights = client.put_artifact(b"\x02" * (2 << 20), name="weights.bin").model_dump()
    workers = [_worker(shared_engine, tmp_path, "large", 8)]
    try:
        wait_for(lambda: _reported(client, "large") == 0, timeout=WITHIN_S, what="large")
        first = client.wait_run(client.start_run("reads", {"weights": weights}).id, WITHIN_S)
        assert first.nodes[0].result == 2 << 20
        wait_for(lambda: _reported(client, "large") == 1, timeout=WITHIN_S, what="its report")
        workers.append(_worker(shared_engine, tmp_path, "small", 2))
        wait_for(lambda: _reported(client, "small") == 0, timeout=WITHIN_S, what="small")

        def ran_on(params: dict[str, object]) -> tuple[str, int]:
            run = client.wait_run(client.start_run("reads", params).id, WITHIN_S)
            provenance = run.nodes[0].provenance
            assert run.state == "succeeded" and provenance is not None
            return provenance.worker.rsplit("/", 1)[-1], provenance.cached_bytes

        assert ran_on({}) == ("small", 0)  # best fit: the fewest free cores
        assert ran_on({"weights": weights}) == ("large", 2 << 20)
    finally:
        for worker in workers:
            worker.stop()


def test_a_result_saved_as_an_artifact_is_held_by_the_worker_that_made_it(
    shared_engine: EngineProcess, tmp_path: Path
) -> None:
    # Before, what a call saved was held by no one: the call reading it went by best fit
    # (0 of 8 to the maker).
    client = Client(shared_engine.url, token=shared_engine.login())
    makes = {"id": "n", "code": MAKES, "worker": LABEL, "resources": {"cpus": 4}}
    client.put_flow("makes", [makes])
    client.put_flow("reads", [{"id": "n", "code": READS, "worker": LABEL}])
    workers = [
        _worker(shared_engine, tmp_path, name, cpus) for name, cpus in (("large", 8), ("small", 2))
    ]
    try:
        wait_for(
            lambda: min(_reported(client, "large"), _reported(client, "small")) >= 0,
            timeout=WITHIN_S,
            what="both workers",
        )
        for _round in range(3):
            made = client.wait_run(client.start_run("makes").id, WITHIN_S).nodes[0]
            assert made.provenance is not None and made.provenance.worker.endswith("/large")
            run = client.wait_run(client.start_run("reads", {"weights": made.result}).id, WITHIN_S)
            read = run.nodes[0]
            assert read.result == 2 << 20 and read.provenance is not None
            assert (read.provenance.worker.rsplit("/", 1)[-1], read.provenance.cached_bytes) == (
                "large",
                2 << 20,
            ), "read where it was made, from that worker's cache"
    finally:
        for worker in workers:
            worker.stop()
