"""An engine in the test's own process: ``create_app(settings)`` behind pytest-aiohttp.

For the logic of the REST and WebSocket layers, the run machine and the dispatcher:
failures point at a line, and nothing waits for a process to start. What only a real
process shows (signals, restarts, the packaged commands) stays in the subprocess tests,
through :class:`~tests.support.client.SocketEngine`, the same interface
(:class:`~tests.support.client.EngineApi`) over a socket to another process.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from fluksio.api.app import create_app
from fluksio.api.appkeys import ENGINE
from fluksio.clock import Clock
from fluksio.engine.db import SqliteDatabase, open_database
from fluksio.engine.front.engine import Engine
from fluksio.engine.passwords import LEAST_COST
from fluksio.engine.provisioning import Configured
from fluksio.engine.settings import EngineSettings
from fluksio.engine.users import UserStore
from fluksio.provisioners.plugins import build_plugins
from tests.support.client import EngineApi, Reply, reply_of
from tests.support.clock import ManualClock
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.openapi_check import AnswerCheck, check_answers
from tests.support.scripted_worker import ScriptedWorker

__all__ = [
    "CPU_NODE",
    "InProcessEngine",
    "Reply",
    "ScriptedWorker",
    "attach_cpu",
    "cpu_flow_on_a_manual_clock",
    "start_in_process",
]

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


class InProcessEngine(EngineApi):
    """The app in the test's process, through pytest-aiohttp's client (a real socket on
    127.0.0.1, the server in this event loop)."""

    def __init__(self, app: web.Application, answers: AnswerCheck) -> None:
        """Made before the app starts (its cleanup is then still open); ``client`` set
        once it has."""
        self.client: TestClient[Any, Any]
        self.app = app
        self.answers = answers
        """Every answer is checked against the OpenAPI document; what was seen."""
        self.token = ""
        self._opened: list[SqliteDatabase] = []
        app.on_cleanup.append(self._close_opened)

    async def _close_opened(self, _app: web.Application) -> None:
        for database in self._opened:
            database.close()

    @property
    def engine(self) -> Engine:
        """The engine behind the app (its stream, workers, views; and what it answers)."""
        return self.app[ENGINE]

    @functools.cached_property
    def database(self) -> SqliteDatabase:
        """A connection of the test's own to the engine's database, as a ``fluksio``
        command on the same data directory opens one (the engine's own is its own);
        closed with the app."""
        database = open_database(self.engine.layout.database)
        self._opened.append(database)
        return database

    async def _send(
        self, method: str, path: str, json_body: Any, body: Any, headers: dict[str, str]
    ) -> Reply:
        async with self.client.request(
            method, path, json=json_body, data=body, headers=headers
        ) as answer:
            return await reply_of(answer)

    def _socket_to(self, path: str) -> tuple[aiohttp.ClientSession, str, ssl.SSLContext | bool]:
        return self.client.session, str(self.client.make_url(path)), True


async def start_in_process(
    aiohttp_client: ClientFactory,
    data_dir: Path,
    *,
    provisioners: Configured | None = None,
    clock: Clock | None = None,
    **settings: Any,
) -> InProcessEngine:
    """An engine app on ``data_dir`` with the test superuser, logged in."""
    config = EngineSettings(data_dir=data_dir, engine_slots=4, **settings)
    configured = provisioners or Configured(build_plugins(), [])
    app = create_app(config, provisioners=configured, clock=clock)
    answers = check_answers(app)
    engine = InProcessEngine(app, answers)
    engine.client = await aiohttp_client(app)
    users = UserStore(engine.database)
    if users.get(SUPERUSER) is None:  # an earlier engine of the test on ``data_dir`` made it
        # The least cost: its password guards a throwaway engine, which every test logs
        # in to (the default's two scrypt runs were a third of the fast tier's time).
        users.add(SUPERUSER, SUPERUSER_PASSWORD, is_superuser=True, cost=LEAST_COST)
    engine.token = await engine.login()
    return engine


CPU_NODE = "def process():\n    return 1\n"


async def cpu_flow_on_a_manual_clock(
    aiohttp_client: ClientFactory, data_dir: Path
) -> tuple[InProcessEngine, ManualClock]:
    """An engine on a clock the test moves (starting now), with a one-node flow ``cpu``
    whose node is bound to a worker labelled cpu."""
    clock = ManualClock(time.time())
    api = await start_in_process(aiohttp_client, data_dir, clock=clock)
    await api.put_flow("cpu", [{"id": "n", "code": CPU_NODE, "worker": "cpu"}])
    return api, clock


async def attach_cpu(api: InProcessEngine, name: str) -> ScriptedWorker:
    """A scripted worker ``name`` labelled cpu, on a token of its own."""
    return await api.attach(await api.mint(name, ["cpu"]), name=name, labels=["cpu"])
