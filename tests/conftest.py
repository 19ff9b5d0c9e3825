from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.client import Client, local
from fluksio.client.executor import RemoteExecutor
from tests.support.engine import EngineProcess, start_engine
from tests.support.inprocess import ClientFactory, InProcessEngine, start_in_process
from tests.support.postgres import LocalPostgres, fresh_database, local_postgres
from tests.support.worker import WorkerProcess

PROCESS_FIXTURES = frozenset({"engine", "shared_engine", "admin_token"})
"""Fixtures that start the engine as a real process: a test using one is marked ``process``."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Refuse to run a grouped test beside others: the tests marked ``xdist_group("cluster")``
    share the local Slurm and Grid Engine and must run one at a time, on one worker.

    pytest-xdist's ``--dist loadgroup`` groups them by a suffix on each test's id; when that
    fails to take (it silently did on pytest 9.2, pytest-xdist issue 1386), they would run
    at once and fail each other in ways that look like flakes, so this says so instead.
    """
    grouped = item.get_closest_marker("xdist_group") is not None
    if grouped and getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid:
        pytest.fail(
            "--dist loadgroup did not group this test with the others that share the"
            " cluster: this pytest-xdist and pytest do not work together (see pyproject.toml)",
            pytrace=False,
        )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def engine(data_dir: Path, tmp_path: Path) -> Iterator[EngineProcess]:
    """A fresh engine process on its own data directory."""
    process = start_engine(data_dir, tmp_path / "logs")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def shared_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """One engine for a module whose tests do not change what the others see."""
    root = tmp_path_factory.mktemp("engine")
    process = start_engine(root / "data", root / "logs")
    yield process
    process.stop()


@pytest.fixture
def admin_token(engine: EngineProcess) -> str:
    return engine.login()


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """Worker processes a test started and appends here: each is stopped after it."""
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture
async def api(aiohttp_client: ClientFactory, tmp_path: Path) -> InProcessEngine:
    """An engine in this process (``create_app``), its superuser logged in."""
    return await start_in_process(aiohttp_client, tmp_path / "data")


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    """A module's own engine and worker labelled ``gpu`` (``local()``), for executor tests
    (a module that wants another client defines its own)."""
    with local(worker_labels=["gpu"]) as own:
        yield own


@pytest.fixture
def gpu(client: Client) -> Iterator[RemoteExecutor]:
    with client.executor(worker="gpu", limit=120) as executor:
        yield executor


@pytest.fixture
def pg_cluster() -> LocalPostgres:
    """The local PostgreSQL cluster (``make postgres-up``): skips without it, fails under
    ``CI=true``."""
    return local_postgres()


@pytest.fixture
def pg_database(pg_cluster: LocalPostgres) -> Iterator[str]:
    """The URL of an empty database of the test's own on it, dropped after."""
    with fresh_database(pg_cluster) as url:
        yield url
